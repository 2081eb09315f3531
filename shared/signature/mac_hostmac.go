//go:build wasip1 && edgehook_hostmac

package signature

import (
	"crypto/sha256"
	"runtime"
	"unsafe"
)

// With the edgehook_hostmac tag, a wasip1 build (the relay module of the local harness,
// edge/cmd/wasi) asks its host for HMAC-SHA256: Go's SHA-256 compiled to WASM costs ~40–190 µs per
// KB, the host's a few µs. The host function is edge/harness/abi.HMACFunc.
//
//go:wasmimport edgehook hmac_sha256
func hostHMAC(keyPtr, keyLen, iovPtr, iovCount, outPtr uint32)

// mac returns HMAC-SHA256(key, parts...) computed by the host.
func mac(key []byte, parts ...[]byte) []byte {
	iov := make([]uint32, 0, 2*len(parts))
	for _, p := range parts {
		iov = append(iov, addr(p), uint32(len(p)))
	}
	out := make([]byte, sha256.Size)
	hostHMAC(addr(key), uint32(len(key)), uint32(uintptr(unsafe.Pointer(unsafe.SliceData(iov)))), uint32(len(parts)), addr(out))
	runtime.KeepAlive(parts)
	runtime.KeepAlive(key)
	return out
}

// addr returns the guest address of b's first byte (0 for an empty slice).
func addr(b []byte) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
