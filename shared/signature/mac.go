//go:build !(wasip1 && edgehook_hostmac)

package signature

import (
	"crypto/hmac"
	"crypto/sha256"
)

// mac returns HMAC-SHA256(key, parts...) without joining the parts into one buffer.
func mac(key []byte, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, key)
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}
