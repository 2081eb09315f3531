package signature

// Canonical exposes the hop's signed prefix to the tests (docs/PROTOCOL.md shows it verbatim).
func (h *Hop) Canonical() []byte { return h.canonical(nil) }

// ParseCanonicalInt exposes parseCanonicalInt to its test against strconv.
var ParseCanonicalInt = parseCanonicalInt

// DecodeSig exposes decodeSig to its test against encoding/base64.
var DecodeSig = decodeSig
