// Package abi is the contract between the relay's WASI module (edge/cmd/wasi) and its wazero host
// (edge/harness): the names of the imported and exported functions, their result codes, and the
// byte layout of the messages that cross the boundary.
//
// It imports only the standard library and edge/relay, so both sides compile it.
//
// # Calls
//
// The host writes an encoded relay.Request into the buffer the guest export BufferFunc returns
// (asking again only for a request larger than the last buffer), then calls HandleFunc with its
// length; HandleFunc returns the encoded relay.Response as
// pointer<<32 | length, valid until the next call into the guest.
//
// An import that answers with bytes (KV get, the upstream request) leaves them with the host and
// returns Result(code, length); the guest then allocates length bytes and calls TakeFunc to have
// them copied in, unless it handed out a buffer the answer fits in (UpstreamFunc). Nothing is ever
// written into guest memory the guest did not hand out for it.
//
// # Encoding
//
// Little-endian. A string or byte slice is a uint32 length and the bytes; a header map is a uint32
// count and that many name, value string pairs. A request, which the guest decodes on every call,
// is laid out flat instead (see EncodeRequest).
package abi

// ImportModule is the module name of every host function.
const ImportModule = "edgehook"

// Names of the host functions (module ImportModule).
const (
	// KVGetAllFunc(iovPtr, count u32) → u64 Result: performs count KV reads in one call (a
	// request's reads, relay.Deps.ReadAll) and answers CodeOK with their results (see
	// AppendKVResult), or CodeSame when those are byte for byte its last answer to this instance
	// (the guest keeps that one: nothing to take). The iov array holds count (ns, keyPtr, keyLen
	// u32) triples.
	KVGetAllFunc = "kv_get_all"
	// KVPutFunc(ns, keyPtr, keyLen, valPtr, valLen u32, ttlSeconds i64) → u64 Result: CodeOK, or
	// CodeError with a message.
	KVPutFunc = "kv_put"
	// UpstreamFunc(reqPtr, reqLen, outPtr, outCap u32) → u64 Result: CodeOK with an encoded
	// relay.UpstreamResponse; CodeTimeout (relay.ErrUpstreamTimeout), CodeBlocked
	// (relay.ErrUpstreamBlocked) or CodeError with a message. An answer of CodeOK that
	// fits in outCap bytes is already written at outPtr, with nothing to take: a request takes
	// one host call, not two, when the guest's buffer is large enough.
	UpstreamFunc = "upstream"
	// TakeFunc(dst u32) copies the bytes of the last Result into guest memory at dst.
	TakeFunc = "take"
	// NowFunc() → i64 is the host clock in unix nanoseconds.
	NowFunc = "now"
	// LogFunc(ptr, len u32) writes one line to the host's log.
	LogFunc = "log"
	// HMACFunc(keyPtr, keyLen, iovPtr, iovCount, outPtr u32) writes HMAC-SHA256(key, parts) to the
	// 32 bytes at outPtr; the iov array holds iovCount (pointer u32, length u32) pairs.
	HMACFunc = "hmac_sha256"
)

// Names of the guest's exports.
const (
	// BufferFunc(size u32) → u32 returns the address of a guest buffer of at least size bytes.
	BufferFunc = "edgehook_buffer"
	// HandleFunc(size u32) → u64 handles the encoded request in the buffer; see the package doc.
	HandleFunc = "edgehook_handle"
)

// KV namespaces, the ns argument of KVGetAllFunc and KVPutFunc.
const (
	NamespaceSubscribers uint32 = 1
	NamespaceDedup       uint32 = 2
)

// Result codes of the host functions.
const (
	CodeOK       uint32 = 0
	CodeNotFound uint32 = 1
	CodeError    uint32 = 2
	CodeTimeout  uint32 = 3
	// CodeSame says the answer is the function's previous answer again, which the guest kept.
	CodeSame uint32 = 4
	// CodeBlocked says the host refused to connect to the address (an upstream's only).
	CodeBlocked uint32 = 5
)

// Result packs a result code and the length of the bytes waiting for TakeFunc.
func Result(code uint32, length int) uint64 { return uint64(code)<<32 | uint64(uint32(length)) }

// SplitResult is the inverse of Result.
func SplitResult(r uint64) (code uint32, length uint32) { return uint32(r >> 32), uint32(r) }

// PackPointer packs a guest address and a length into one uint64, as HandleFunc returns them.
func PackPointer(ptr, length uint32) uint64 { return uint64(ptr)<<32 | uint64(length) }

// SplitPointer is the inverse of PackPointer.
func SplitPointer(p uint64) (ptr, length uint32) { return uint32(p >> 32), uint32(p) }

// HostError is an error the host reported as a message.
type HostError string

func (e HostError) Error() string { return string(e) }
