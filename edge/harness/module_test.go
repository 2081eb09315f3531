package harness_test

import (
	"encoding/binary"
	"slices"

	"github.com/edgehook/edgehook/edge/harness/abi"
)

// Hand-assembled modules with the exports the host needs and next to no code: the benchmarks
// time the host's own round trip with them, and the tests a guest that never returns.

// wasmModule returns a module importing the host's clock (function 0) and exporting memory,
// edgehook_buffer (which returns 1024, room for requests up to 31 KB) and edgehook_handle with
// the given body (its locals' declaration, its instructions and the final end), with a mutable
// i32 global (0) and data at address dataAt.
func wasmModule(handleBody []byte, data []byte) []byte {
	section := func(id byte, content ...[]byte) []byte {
		c := slices.Concat(content...)
		return slices.Concat([]byte{id}, uleb(uint64(len(c))), c)
	}
	name := func(s string) []byte { return slices.Concat(uleb(uint64(len(s))), []byte(s)) }
	body := func(b []byte) []byte { return slices.Concat(uleb(uint64(len(b))), b) }
	return slices.Concat(
		[]byte("\x00asm\x01\x00\x00\x00"),
		section(1, []byte{3, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 1, 0x7f, 1, 0x7e, 0x60, 0, 1, 0x7e}), // (i32)→i32, (i32)→i64, ()→i64
		section(2, []byte{1}, name(abi.ImportModule), name(abi.NowFunc), []byte{0, 2}),
		section(3, []byte{2, 0, 1}),
		section(5, []byte{1, 0, 1}),                   // one page
		section(6, []byte{1, 0x7f, 1, 0x41, 0, 0x0b}), // a mutable i32, 0
		section(7, []byte{3}, name("memory"), []byte{2, 0}, name(abi.BufferFunc), []byte{0, 1}, name(abi.HandleFunc), []byte{0, 2}),
		section(10, []byte{2}, body([]byte{0, 0x41, 0x80, 0x08, 0x0b}), body(handleBody)),
		section(11, []byte{1, 0, 0x41}, sleb(dataAt), []byte{0x0b}, uleb(uint64(len(data))), data),
	)
}

// dataAt is where wasmModule puts its data.
const dataAt = 32768

// returning is a handle body returning the data of wasmModule as its response.
func returning(data []byte) []byte {
	return slices.Concat([]byte{0, 0x42}, sleb(int64(dataAt)<<32|int64(len(data))), []byte{0x0b})
}

// counting is a handle body that adds one to the global and returns the data of wasmModule, an
// encoded response, with 200 plus the global as its status: each instance counts its calls.
func counting(data []byte) []byte {
	return slices.Concat(
		[]byte{0, 0x23, 0, 0x41, 1, 0x6a, 0x24, 0}, // global = global + 1
		[]byte{0x41}, sleb(dataAt), []byte{0x23, 0, 0x41}, sleb(200), []byte{0x6a, 0x36, 2, 0}, // store 200 + global at dataAt
		[]byte{0x42}, sleb(int64(dataAt)<<32|int64(len(data))), []byte{0x0b},
	)
}

// spinning is a handle body that reads the clock, then loops forever.
var spinning = []byte{0, 0x10, 0, 0x1a, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x00, 0x0b} // call 0, drop, loop br 0 end, unreachable, end

func uleb(v uint64) []byte { return binary.AppendUvarint(nil, v) }

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
