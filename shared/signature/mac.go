//go:build !(wasip1 && edgehook_hostmac)

package signature

import (
	"crypto/hmac"
	"crypto/sha256"
)

// mac writes HMAC-SHA256(key, parts...) to dst without joining the parts into one buffer.
func mac(dst *[sha256.Size]byte, key []byte, parts ...[]byte) {
	h := hmac.New(sha256.New, key)
	for _, p := range parts {
		h.Write(p)
	}
	h.Sum(dst[:0])
}
