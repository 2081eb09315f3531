// Package fuel rewrites a WebAssembly module so that a long-running call can be stopped cheaply.
//
// wazero stops a call past its deadline by compiling a termination check into every loop header,
// and each check leaves the compiled code for Go and comes back: about 45 ns here. Go's WASM
// backend jumps through each function's outer loop, so a request in the relay's module passes
// about a thousand loop headers, and the checks cost as much as everything else the guest does.
// Instrument puts a counter in their place: every loop header decrements a global, and only when
// it reaches zero does the guest call an imported function, which can trap the call (end it) or
// return more fuel. The module is then compiled without wazero's checks and still cannot run for
// long without reaching the host: at most Fuel loop iterations.
package fuel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Instrument returns wasm with an import module.name of type () -> i32, a mutable i32 global
// holding the fuel (0 at the start, so the first loop header calls the import) and, at every
// loop header, code that takes one unit of fuel or, with none left, sets the global to what the
// import returns. The import goes after the existing ones, so every defined function's index
// moves up by one: calls, ref.func, exports, the start function, element segments and the name
// section are renumbered to match.
func Instrument(wasm []byte, module, name string) ([]byte, error) {
	r := &reader{b: wasm}
	if string(r.bytes(8)) != "\x00asm\x01\x00\x00\x00" {
		return nil, errors.New("fuel: not a WebAssembly 1.0 binary module")
	}
	var secs []section
	for !r.done() && r.err == nil {
		id := r.byte()
		body := r.bytes(int(r.u32()))
		secs = append(secs, section{id, body})
	}
	if r.err != nil {
		return nil, fmt.Errorf("fuel: module sections: %w", r.err)
	}
	m := &rewriter{module: module, name: name}
	// The counts the rewrites need come first: new type index, imported functions and globals.
	for _, s := range secs {
		var err error
		switch s.id {
		case secType:
			m.typeIdx, err = vecCount(s.body)
		case secImport:
			m.importedFuncs, m.importedGlobals, err = countImports(s.body)
		case secGlobal:
			m.definedGlobals, err = vecCount(s.body)
		}
		if err != nil {
			return nil, fmt.Errorf("fuel: section %d: %w", s.id, err)
		}
	}
	m.globalIdx = m.importedGlobals + m.definedGlobals
	for _, id := range []byte{secType, secImport, secGlobal} {
		if !slices.ContainsFunc(secs, func(s section) bool { return s.id == id }) {
			secs = insertSection(secs, section{id, []byte{0}}) // an empty vector
		}
	}
	out := append([]byte(nil), wasm[:8]...)
	for _, s := range secs {
		body, err := m.rewrite(s)
		if err != nil {
			return nil, fmt.Errorf("fuel: section %d: %w", s.id, err)
		}
		out = append(out, s.id)
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	return out, nil
}

// Section ids (WebAssembly core spec 5.5.2).
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

type section struct {
	id   byte
	body []byte
}

// order is a non-custom section's place in a module (the tag section sits before globals).
func order(id byte) int {
	switch id {
	case secTag:
		return 6
	case secGlobal, secExport, secStart, secElement:
		return int(id) + 1
	case secDataCount:
		return 11
	case secCode, secData:
		return int(id) + 2
	}
	return int(id)
}

// insertSection puts s before the first non-custom section that comes after it.
func insertSection(secs []section, s section) []section {
	for i, x := range secs {
		if x.id != secCustom && order(x.id) > order(s.id) {
			return slices.Insert(secs, i, s)
		}
	}
	return append(secs, s)
}

type rewriter struct {
	module, name                                            string
	typeIdx, importedFuncs, importedGlobals, definedGlobals uint32
	globalIdx                                               uint32
}

// fn maps an old function index to the new one: the import goes after the imported functions.
func (m *rewriter) fn(i uint32) uint32 {
	if i >= m.importedFuncs {
		return i + 1
	}
	return i
}

func (m *rewriter) rewrite(s section) ([]byte, error) {
	r := &reader{b: s.body}
	var out []byte
	switch s.id {
	case secType: // append () -> i32
		n := r.u32()
		out = appendU32(out, n+1)
		out = append(out, r.rest()...)
		out = append(out, 0x60, 0, 1, 0x7f)
	case secImport:
		n := r.u32()
		out = appendU32(out, n+1)
		out = append(out, r.rest()...)
		out = appendName(appendName(out, m.module), m.name)
		out = appendU32(append(out, 0), m.typeIdx)
	case secGlobal: // append (mut i32) = 0
		n := r.u32()
		out = appendU32(out, n+1)
		for range n {
			out = append(out, r.byte(), r.byte()) // valtype, mutability
			out = m.constExpr(out, r)
		}
		out = append(out, 0x7f, 1, 0x41, 0, 0x0b)
	case secExport:
		n := r.u32()
		out = appendU32(out, n)
		for range n {
			out = appendName(out, r.name())
			kind, idx := r.byte(), r.u32()
			if kind == 0 {
				idx = m.fn(idx)
			}
			out = appendU32(append(out, kind), idx)
		}
	case secStart:
		out = appendU32(out, m.fn(r.u32()))
	case secElement:
		return m.elements(r)
	case secCode:
		return m.code(r)
	case secCustom:
		return m.custom(r)
	default:
		return s.body, nil
	}
	if r.err == nil && !r.done() {
		r.err = errors.New("trailing bytes")
	}
	return out, r.err
}

// elements renumbers the function indices of element segments given as indices (flags 0 to 3;
// segments of expressions, flags 4 to 7, are refused).
func (m *rewriter) elements(r *reader) ([]byte, error) {
	n := r.u32()
	out := appendU32(nil, n)
	for range n {
		flags := r.u32()
		switch flags {
		case 0:
			out = m.constExpr(appendU32(out, flags), r)
		case 1, 3:
			out = append(appendU32(out, flags), r.byte()) // elemkind
		case 2:
			out = appendU32(appendU32(out, flags), r.u32()) // table
			out = m.constExpr(out, r)
			out = append(out, r.byte()) // elemkind
		default:
			return nil, fmt.Errorf("element segment with flags %d is not supported", flags)
		}
		count := r.u32()
		out = appendU32(out, count)
		for range count {
			out = appendU32(out, m.fn(r.u32()))
		}
	}
	return out, r.check()
}

// custom renumbers the function indices of the name section's function and local names.
func (m *rewriter) custom(r *reader) ([]byte, error) {
	name := r.name()
	out := appendName(nil, name)
	if name != "name" {
		return append(out, r.rest()...), r.check()
	}
	for !r.done() && r.err == nil {
		id := r.byte()
		sub := &reader{b: r.bytes(int(r.u32()))}
		var body []byte
		switch id {
		case 1, 2: // function names: (idx, name)*; local names: (idx, (idx, name)*)*
			n := sub.u32()
			body = appendU32(nil, n)
			for range n {
				body = appendU32(body, m.fn(sub.u32()))
				if id == 1 {
					body = appendName(body, sub.name())
					continue
				}
				locals := sub.u32()
				body = appendU32(body, locals)
				for range locals {
					body = appendName(appendU32(body, sub.u32()), sub.name())
				}
			}
			if sub.err == nil && !sub.done() {
				sub.err = errors.New("trailing bytes in the name section")
			}
			if sub.err != nil {
				return nil, sub.err
			}
		default:
			body = sub.b
		}
		out = append(out, id)
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	return out, r.check()
}

// code rewrites every function body.
func (m *rewriter) code(r *reader) ([]byte, error) {
	n := r.u32()
	out := appendU32(nil, n)
	var body []byte
	for i := range n {
		fr := &reader{b: r.bytes(int(r.u32()))}
		if r.err != nil {
			break
		}
		var err error
		if body, err = m.function(body[:0], fr); err != nil {
			return nil, fmt.Errorf("function %d: %w", i, err)
		}
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	return out, r.check()
}

// check is what a loop header gets: if fuel { fuel-- } else { fuel = refuel() }.
func (m *rewriter) check(out []byte) []byte {
	g := appendU32(nil, m.globalIdx)
	out = append(append(out, 0x23), g...)               // global.get $fuel
	out = append(out, 0x04, 0x40)                       // if
	out = append(append(out, 0x23), g...)               // global.get $fuel
	out = append(out, 0x41, 1, 0x6b)                    // i32.const 1, i32.sub
	out = append(append(out, 0x24), g...)               // global.set $fuel
	out = append(out, 0x05)                             // else
	out = appendU32(append(out, 0x10), m.importedFuncs) // call $refuel
	out = append(append(out, 0x24), g...)               // global.set $fuel
	return append(out, 0x0b)                            // end
}

// function copies one body, renumbering calls and adding the check after every loop.
func (m *rewriter) function(out []byte, r *reader) ([]byte, error) {
	start := r.pos
	for range r.u32() { // locals: (count, type)*
		r.u32()
		r.byte()
	}
	out = append(out, r.b[start:r.pos]...)
	for !r.done() && r.err == nil {
		start := r.pos
		op := r.byte()
		switch {
		case op == 0x10 || op == 0x12 || op == 0xd2: // call, return_call, ref.func
			out = appendU32(append(out, op), m.fn(r.u32()))
			continue
		case op == 0x03: // loop blocktype
			r.s64()
			out = m.check(append(out, r.b[start:r.pos]...))
			continue
		case op == 0x02 || op == 0x04: // block, if: blocktype (an s33)
			r.s64()
		case op == 0x0c || op == 0x0d || (op >= 0x20 && op <= 0x26) || op == 0x3f || op == 0x40:
			r.u32() // br, br_if, local/global/table get/set/tee, memory.size/grow: one index
		case op == 0x0e: // br_table
			for range r.u32() {
				r.u32()
			}
			r.u32()
		case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect: type, table
			r.u32()
			r.u32()
		case op == 0x1c: // select t*
			for range r.u32() {
				r.byte()
			}
		case op >= 0x28 && op <= 0x3e: // loads and stores: memarg
			if align := r.u32(); align&0x40 != 0 {
				r.u32() // memory index
			}
			r.u64()
		case op == 0x41 || op == 0x42:
			r.s64()
		case op == 0x43:
			r.bytes(4)
		case op == 0x44:
			r.bytes(8)
		case op == 0xd0: // ref.null t
			r.byte()
		case op == 0xfc:
			m.misc(r)
		case op <= 0x01 || op == 0x05 || op == 0x0b || op == 0x0f || op == 0x1a || op == 0x1b ||
			(op >= 0x45 && op <= 0xc4) || op == 0xd1:
			// no immediates
		default:
			return nil, fmt.Errorf("opcode %#x at byte %d is not supported", op, start)
		}
		out = append(out, r.b[start:r.pos]...)
	}
	return out, r.check()
}

// misc skips the immediates of a 0xfc-prefixed instruction.
func (m *rewriter) misc(r *reader) {
	switch sub := r.u32(); {
	case sub <= 7: // saturating truncations
	case sub == 9 || sub == 11 || sub == 13 || (sub >= 15 && sub <= 17):
		r.u32()
	case sub == 8 || sub == 10 || sub == 12 || sub == 14:
		r.u32()
		r.u32()
	default:
		r.err = fmt.Errorf("instruction 0xfc %d is not supported", sub)
	}
}

func vecCount(b []byte) (uint32, error) {
	r := &reader{b: b}
	n := r.u32()
	return n, r.err
}

// countImports counts the imported functions and globals.
func countImports(b []byte) (funcs, globals uint32, err error) {
	r := &reader{b: b}
	for range r.u32() {
		r.name()
		r.name()
		switch kind := r.byte(); kind {
		case 0: // func: type index
			r.u32()
			funcs++
		case 1: // table: reftype, limits
			r.byte()
			r.limits()
		case 2: // memory: limits
			r.limits()
		case 3: // global: valtype, mutability
			r.byte()
			r.byte()
			globals++
		case 4: // tag: attribute, type index
			r.byte()
			r.u32()
		default:
			r.err = fmt.Errorf("import kind %d", kind)
		}
	}
	return funcs, globals, r.check()
}

func appendU32(b []byte, v uint32) []byte { return binary.AppendUvarint(b, uint64(v)) }

func appendName(b []byte, s string) []byte { return append(appendU32(b, uint32(len(s))), s...) }

// reader decodes a byte slice; after the first error every read returns zero values and err stays.
type reader struct {
	b   []byte
	pos int
	err error
}

var errShort = errors.New("unexpected end")

func (r *reader) done() bool { return r.pos >= len(r.b) }

func (r *reader) rest() []byte {
	b := r.b[r.pos:]
	r.pos = len(r.b)
	return b
}

func (r *reader) check() error {
	if r.err == nil && !r.done() {
		r.err = errors.New("trailing bytes")
	}
	return r.err
}

func (r *reader) byte() byte {
	if r.err != nil || r.done() {
		r.fail(errShort)
		return 0
	}
	r.pos++
	return r.b[r.pos-1]
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.pos = len(r.b)
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b)-r.pos {
		r.fail(errShort)
		return nil
	}
	r.pos += n
	return r.b[r.pos-n : r.pos]
}

func (r *reader) u64() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.pos:])
	if n <= 0 {
		r.fail(errors.New("bad LEB128"))
		return 0
	}
	r.pos += n
	return v
}

func (r *reader) u32() uint32 {
	v := r.u64()
	if v > 1<<32-1 {
		r.fail(errors.New("LEB128 over 32 bits"))
	}
	return uint32(v)
}

// s64 skips a signed LEB128 (its value is never needed).
func (r *reader) s64() {
	for i := 0; ; i++ {
		if c := r.byte(); c&0x80 == 0 || r.err != nil || i == 9 {
			return
		}
	}
}

func (r *reader) name() string { return string(r.bytes(int(r.u32()))) }

func (r *reader) limits() {
	if flags := r.byte(); flags&1 != 0 {
		r.u64()
		r.u64()
	} else {
		r.u64()
	}
}

// constExpr copies a constant expression, renumbering ref.func.
func (m *rewriter) constExpr(out []byte, r *reader) []byte {
	for r.err == nil {
		start := r.pos
		switch op := r.byte(); op {
		case 0x0b:
			return append(out, op)
		case 0x41, 0x42:
			r.s64()
		case 0x43:
			r.bytes(4)
		case 0x44:
			r.bytes(8)
		case 0x23:
			r.u32()
		case 0xd2:
			out = appendU32(append(out, op), m.fn(r.u32()))
			continue
		default:
			r.fail(fmt.Errorf("constant expression opcode %#x is not supported", op))
		}
		out = append(out, r.b[start:r.pos]...)
	}
	return out
}
