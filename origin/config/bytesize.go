package config

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes that reads "262144", "256KiB", "256KB" (1000-based), "4MiB" or "4MB".
// It implements pflag.Value.
type ByteSize int64

// sizeUnits lists the accepted suffixes, longest first so "KiB" is tried before "B".
var sizeUnits = []struct {
	suffix string
	factor int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
	{"B", 1},
}

// String renders the size in the largest binary unit that divides it.
func (b ByteSize) String() string {
	for _, u := range []struct {
		suffix string
		factor int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.factor == 0 {
			return strconv.FormatInt(int64(b)/u.factor, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// Set parses s; negative sizes and unknown units are errors.
func (b *ByteSize) Set(s string) error {
	num, factor := strings.TrimSpace(s), int64(1)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, factor = strings.TrimSpace(n), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/factor {
		return fmt.Errorf("%q is not a size (e.g. 262144, 256KiB, 4MiB)", s)
	}
	*b = ByteSize(n * factor)
	return nil
}

// Type names the value in help output.
func (b *ByteSize) Type() string { return "size" }
