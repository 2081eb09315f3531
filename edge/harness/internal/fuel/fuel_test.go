package fuel_test

import (
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/edgehook/edgehook/edge/harness/internal/fuel"
)

func section(id byte, content ...[]byte) []byte {
	c := slices.Concat(content...)
	return slices.Concat([]byte{id}, binary.AppendUvarint(nil, uint64(len(c))), c)
}

func name(s string) []byte { return append([]byte{byte(len(s))}, s...) }

func body(b ...byte) []byte { return append([]byte{byte(len(b))}, b...) }

// testModule imports env.f (function 0) and defines count(n) (function 1: a loop of n
// iterations returning n), direct(n) (2: calls count), indirect() (3: count(7) through the table)
// and an immutable global, with a name section; countBody replaces count's body when set.
func testModule(countBody []byte) []byte {
	if countBody == nil {
		countBody = body(1, 1, 0x7f, // one i32 local, i
			0x03, 0x40, // loop
			0x20, 1, 0x41, 1, 0x6a, 0x21, 1, // i = i + 1
			0x20, 1, 0x20, 0, 0x49, 0x0d, 0, // br_if 0 (i < n)
			0x0b, 0x20, 1, 0x0b) // end, i
	}
	return slices.Concat(
		[]byte("\x00asm\x01\x00\x00\x00"),
		section(1, []byte{3, 0x60, 0, 0, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 0, 1, 0x7f}),
		section(2, []byte{1}, name("env"), name("f"), []byte{0, 0}),
		section(3, []byte{3, 1, 1, 2}),
		section(4, []byte{1, 0x70, 0, 1}),
		section(6, []byte{1, 0x7f, 0, 0x41, 5, 0x0b}),
		section(7, []byte{3}, name("count"), []byte{0, 1}, name("direct"), []byte{0, 2}, name("indirect"), []byte{0, 3}),
		section(9, []byte{1, 0, 0x41, 0, 0x0b, 1, 1}),
		section(10, []byte{3}, countBody,
			body(0, 0x20, 0, 0x10, 1, 0x0b),
			body(0, 0x41, 7, 0x41, 0, 0x11, 1, 0, 0x0b)),
		section(0, name("name"), section(1, []byte{3, 1}, name("count"), []byte{2}, name("direct"), []byte{3}, name("indirect"))),
	)
}

// run instruments the test module, instantiates it with a refuel that gives perRefuel and counts
// its calls, and returns the module and the count.
func run(t *testing.T, perRefuel uint32) (api.Module, *int) {
	t.Helper()
	wasm, err := fuel.Instrument(testModule(nil), "fuel", "refuel")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	t.Cleanup(func() { _ = rt.Close(ctx) })
	refuels := new(int)
	if _, err := rt.NewHostModuleBuilder("env").NewFunctionBuilder().WithFunc(func() {}).Export("f").Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.NewHostModuleBuilder("fuel").NewFunctionBuilder().WithFunc(func() uint32 {
		*refuels++
		return perRefuel
	}).Export("refuel").Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	mod, err := rt.Instantiate(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	return mod, refuels
}

func call(t *testing.T, mod api.Module, fn string, args ...uint64) uint64 {
	t.Helper()
	res, err := mod.ExportedFunction(fn).Call(context.Background(), args...)
	if err != nil {
		t.Fatalf("%s: %v", fn, err)
	}
	return res[0]
}

// Every loop header takes one unit of fuel; with none left it refuels, which counts as that
// header's unit: a loop of n iterations with perRefuel fuel refuels ceil(n / (perRefuel+1)) times.
func TestLoopHeadersRefuel(t *testing.T) {
	for _, n := range []uint64{1, 10, 11, 25} {
		mod, refuels := run(t, 9)
		if got := call(t, mod, "count", n); got != n {
			t.Fatalf("count(%d) = %d", n, got)
		}
		if *refuels != int((n+9)/10) {
			t.Errorf("count(%d) refuelled %d times, want %d", n, *refuels, (n+9)/10)
		}
	}
}

// Calls, exports, element segments and the name section follow the defined functions' indices,
// which move up by one for the added import.
func TestFunctionIndicesRenumbered(t *testing.T) {
	mod, _ := run(t, 100)
	if got := call(t, mod, "direct", 3); got != 3 {
		t.Errorf("direct(3) = %d, want 3", got)
	}
	if got := call(t, mod, "indirect"); got != 7 {
		t.Errorf("indirect() = %d, want 7", got)
	}
	for _, fn := range []string{"count", "direct", "indirect"} {
		if got := mod.ExportedFunction(fn).Definition().Name(); got != fn {
			t.Errorf("export %s is named %q in the name section", fn, got)
		}
	}
}

func TestInstrumentRejects(t *testing.T) {
	for _, tc := range []struct{ name, wasm, wants string }{
		{"not wasm", "not a module", "not a WebAssembly"},
		{"truncated", string(testModule(nil)[:45]), "sections"},
		{"SIMD", string(testModule(body(0, 0xfd, 0x0c, 0x0b))), "opcode 0xfd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fuel.Instrument([]byte(tc.wasm), "fuel", "refuel")
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wants)
			}
		})
	}
}
