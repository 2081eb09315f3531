package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/edgehook/edgehook/edge/relay"
)

// ErrShort is wrapped by every decode error: the message ended early or has trailing bytes.
var ErrShort = errors.New("abi: truncated or oversized message")

// EncodeRequest appends the encoding of r to dst. Unlike the other messages a request is laid out
// flat, for the guest to decode in one pass with one allocation: four uint32s (the length of the
// text, of the method and of the body, and the number of header fields), each field's name and
// value lengths (uint32s), the text (the method, then each field's name and value) and the body.
func EncodeRequest(dst []byte, r *relay.Request) []byte {
	text := len(r.Method)
	for _, f := range r.Header {
		text += len(f.Name) + len(f.Value)
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(text))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Method)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Body)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Header)))
	for _, f := range r.Header {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(f.Name)))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(f.Value)))
	}
	dst = append(dst, r.Method...)
	for _, f := range r.Header {
		dst = append(append(dst, f.Name...), f.Value...)
	}
	return append(dst, r.Body...)
}

// DecodeRequest decodes a request into dst, reusing dst.Header's array. Nothing is copied: the
// method, the header fields and Body all alias b, which the caller must leave unmodified while it
// uses the request (the guest handles a request before the host writes the next into its buffer,
// and the relay keeps nothing of a request). A copy of the text was the guest's one allocation
// in decoding a request.
func DecodeRequest(dst *relay.Request, b []byte) error {
	if len(b) < 16 {
		return fmt.Errorf("%w: request", ErrShort)
	}
	u32 := func(i uint64) uint64 { return uint64(binary.LittleEndian.Uint32(b[i:])) }
	textLen, methodLen, bodyLen, n := u32(0), u32(4), u32(8), u32(12)
	lengths := b[16:]
	if n > uint64(len(lengths))/8 || textLen+bodyLen != uint64(len(lengths))-8*n || methodLen > textLen {
		return fmt.Errorf("%w: request", ErrShort)
	}
	rest := lengths[8*n:]
	text := unsafe.String(unsafe.SliceData(rest), textLen)
	h := dst.Header[:0]
	off := methodLen
	for i := range n {
		name, value := u32(16+8*i), u32(20+8*i)
		if name > textLen-off || value > textLen-off-name {
			return fmt.Errorf("%w: request", ErrShort)
		}
		h = append(h, relay.Field{Name: text[off : off+name], Value: text[off+name : off+name+value]})
		off += name + value
	}
	if off != textLen {
		return fmt.Errorf("%w: request", ErrShort)
	}
	*dst = relay.Request{Method: text[:methodLen], Header: h, Body: rest[textLen:len(rest):len(rest)]}
	return nil
}

// EncodeResponse appends the encoding of r to dst.
func EncodeResponse(dst []byte, r *relay.Response) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(r.Status))
	dst = appendHeader(dst, r.Header)
	dst = appendBytes(dst, r.Body)
	return appendString(dst, r.Detail)
}

// DecodeResponse decodes a response; its strings and Body alias b. The response and up to four
// header fields, as many as the relay's answers have, take one allocation.
func DecodeResponse(b []byte) (*relay.Response, error) {
	d := decoder{b: b}
	r := new(struct {
		relay.Response
		fields [4]relay.Field
	})
	r.Response = relay.Response{Status: int(d.uint32()), Header: d.header(r.fields[:0]), Body: d.bytes(), Detail: d.string()}
	return &r.Response, d.done("response")
}

// EncodeUpstreamRequest appends the encoding of r to dst.
func EncodeUpstreamRequest(dst []byte, r *relay.UpstreamRequest) []byte {
	dst = appendString(dst, r.URL)
	dst = appendHeader(dst, r.Header)
	dst = appendBytes(dst, r.Body)
	return binary.LittleEndian.AppendUint64(dst, uint64(r.Timeout))
}

// DecodeUpstreamRequest decodes an upstream request; its strings and Body alias b. The request and
// up to sixteen header fields take one allocation.
func DecodeUpstreamRequest(b []byte) (*relay.UpstreamRequest, error) {
	d := decoder{b: b}
	u := new(struct {
		relay.UpstreamRequest
		fields [16]relay.Field
	})
	r := &u.UpstreamRequest
	*r = relay.UpstreamRequest{URL: d.string(), Header: d.header(u.fields[:0]), Body: d.bytes()}
	if t := d.uint64(); t <= math.MaxInt64 {
		r.Timeout = time.Duration(t)
	} else {
		d.fail()
	}
	return r, d.done("upstream request")
}

// EncodeUpstreamResponse appends the encoding of r to dst.
func EncodeUpstreamResponse(dst []byte, r *relay.UpstreamResponse) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(r.Status))
	dst = appendHeader(dst, r.Header)
	return appendBytes(dst, r.Body)
}

// DecodeUpstreamResponse decodes an upstream response into dst, reusing dst.Header's array;
// its header strings and Body alias b.
func DecodeUpstreamResponse(dst *relay.UpstreamResponse, b []byte) error {
	d := decoder{b: b}
	*dst = relay.UpstreamResponse{Status: int(d.uint32()), Header: d.header(dst.Header), Body: d.bytes()}
	return d.done("upstream response")
}

// AppendKVResult appends one read's result to the answer of KVGetAllFunc: a uint32 result code
// and a string, the value for CodeOK, the message for CodeError and empty for CodeNotFound.
func AppendKVResult(dst []byte, value string, found bool, err error) []byte {
	switch {
	case err != nil:
		return appendString(binary.LittleEndian.AppendUint32(dst, CodeError), err.Error())
	case !found:
		return appendString(binary.LittleEndian.AppendUint32(dst, CodeNotFound), "")
	}
	return appendString(binary.LittleEndian.AppendUint32(dst, CodeOK), value)
}

// DecodeKVResults fills in the results of reads from the answer of KVGetAllFunc, one per read in
// order. The values are substrings of s, which the caller must not modify afterwards.
func DecodeKVResults(s string, reads []relay.KVRead) error {
	for i := range reads {
		if len(s) < 8 {
			return fmt.Errorf("%w: KV results", ErrShort)
		}
		code, n := uint32At(s), uint64(uint32At(s[4:]))
		if n > uint64(len(s)-8) {
			return fmt.Errorf("%w: KV results", ErrShort)
		}
		v := s[8 : 8+n]
		s = s[8+n:]
		r := &reads[i]
		switch code {
		case CodeOK:
			r.Value, r.Found, r.Err = v, true, nil
		case CodeNotFound:
			r.Value, r.Found, r.Err = "", false, nil
		case CodeError:
			r.Value, r.Found, r.Err = "", false, HostError(v)
		default:
			return fmt.Errorf("abi: KV result code %d", code)
		}
	}
	if s != "" {
		return fmt.Errorf("%w: KV results", ErrShort)
	}
	return nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

// appendHeader writes the fields in order.
func appendHeader(dst []byte, h relay.Header) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(h)))
	for _, f := range h {
		dst = appendString(dst, f.Name)
		dst = appendString(dst, f.Value)
	}
	return dst
}

// decoder reads fields in order; after the first failure every read returns a zero value and done
// reports the error, so decode functions read straight through without checks in between.
type decoder struct {
	b      []byte
	failed bool
}

func (d *decoder) fail() { d.failed, d.b = true, nil }

func (d *decoder) uint32() uint32 {
	if len(d.b) < 4 {
		d.fail()
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) uint64() uint64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uint32()
	if uint64(n) > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// string returns the next string as a view of the message, which callers own (see header).
func (d *decoder) string() string {
	b := d.bytes()
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// header decodes a header map into dst's array when it has room, or a new one.
func (d *decoder) header(dst relay.Header) relay.Header {
	n := d.uint32()
	// Each pair needs at least 8 bytes, which bounds n before anything is allocated.
	if uint64(n)*8 > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	// Every name and value is a substring of b, not copied: each caller hands over bytes it owns
	// and keeps unmodified while it uses the message (the host a copy of guest memory, the guest
	// its buffer for the upstream answer, which the relay is done with before the next request).
	// A copy was an allocation per decode, which in the guest is most of the cost of decoding.
	rest, size := d.b, 0
	for range 2 * n {
		if len(rest) < 4 {
			d.fail()
			return nil
		}
		l := uint64(binary.LittleEndian.Uint32(rest))
		if l > uint64(len(rest)-4) {
			d.fail()
			return nil
		}
		rest, size = rest[4+l:], size+4+int(l)
	}
	all := unsafe.String(unsafe.SliceData(d.b), size)
	d.b = rest
	h := dst[:0]
	if cap(h) < int(n) || h == nil {
		h = make(relay.Header, 0, n)
	}
	h = h[:n]
	for i := range h {
		h[i].Name = slice(&all)
		h[i].Value = slice(&all)
	}
	return h
}

// slice returns the length-prefixed string at the start of *s, already checked by header, and
// advances *s past it.
func slice(s *string) string {
	l := uint32At(*s)
	v := (*s)[4 : 4+l]
	*s = (*s)[4+l:]
	return v
}

// uint32At reads the little-endian uint32 at the start of s, which holds at least 4 bytes.
func uint32At(s string) uint32 {
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

func (d *decoder) done(what string) error {
	if d.failed || len(d.b) != 0 {
		return fmt.Errorf("%w: %s", ErrShort, what)
	}
	return nil
}
