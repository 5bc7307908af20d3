package driver

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
	"github.com/zclconf/go-cty/cty"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"
)

// hugeArray is the 20 bytes that took the plugin down: an array32 header
// claiming 0xB8D90000 (3.1e9) elements, followed by 15 of them.
func hugeArray() []byte {
	return append([]byte{0xdd, 0xb8, 0xd9, 0x00, 0x00}, make([]byte, 15)...)
}

func nested(open byte, depth int) []byte {
	return append(bytes.Repeat([]byte{open}, depth), 0xc0)
}

// TestDecodeTaskConfigRefusesUnboundedMsgpack feeds the decoders inputs whose
// headers promise more than their bytes hold. Before the bound, the first
// one killed the process with "fatal error: out of memory".
func TestDecodeTaskConfigRefusesUnboundedMsgpack(t *testing.T) {
	tooMany := append([]byte{0xdc, 0xff, 0xff}, make([]byte, 0xffff)...) // 65535 elements + the array
	tooMany = append([]byte{0x92}, append(tooMany, 0x00)...)
	cases := []struct {
		name string
		in   []byte
	}{
		{"array32 of 3.1e9 in 20 bytes", hugeArray()},
		{"map32 of 3.1e9 under a key", append([]byte{0x81, 0xa4, 'a', 'r', 'g', 's', 0xdf, 0xb8, 0xd9, 0x00, 0x00}, make([]byte, 9)...)},
		{"str32 of 4 GiB", []byte{0x81, 0xa7, 'c', 'o', 'm', 'm', 'a', 'n', 'd', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}},
		{"bin32 of 4 GiB", []byte{0xc6, 0xff, 0xff, 0xff, 0xff, 0x00}},
		{"ext32 of 4 GiB", []byte{0xc9, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
		{"array16 longer than its bytes", []byte{0xdc, 0x00, 0x10, 0x01}},
		{"fixmap longer than its bytes", []byte{0x8f, 0xa1, 'a'}},
		{"arrays nested 100 deep", nested(0x91, 100)},
		{"maps nested 100 deep", bytes.Repeat([]byte{0x81, 0xa1, 'a'}, 100)},
		{"more than 65536 values", tooMany},
		{"trailing bytes", []byte{0x80, 0x80}},
		{"never-used type byte", []byte{0xc1}},
		{"truncated float64", []byte{0xcb, 0x00}},
		// cty's decoder panicked on NaN ("Float.SetFloat64(NaN)").
		{"float64 NaN", append(append([]byte{0x81, 0xaa}, "world_size"...), 0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1)},
		{"float32 NaN in a list", append(append([]byte{0x81, 0xa4}, "args"...), 0x91, 0xca, 0xff, 0xc0, 0, 0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkMsgpack(c.in)
			must.True(t, errors.Is(err, errMsgpackBounds), must.Sprintf("got %v", err))
			_, err = DecodeTaskConfig(c.in)
			must.ErrorContains(t, err, "msgpack out of bounds")
			_, err = DecodePluginConfig(c.in)
			must.ErrorContains(t, err, "msgpack out of bounds")
		})
	}
}

// TestCheckMsgpackAcceptsRealEncodings: every encoding cty produces passes
// the bound, and no proper prefix of one does (msgpack is prefix-free, so a
// prefix is always incomplete).
func TestCheckMsgpackAcceptsRealEncodings(t *testing.T) {
	vals := []cty.Value{
		toCty(map[string]any{"command": "/bin/true", "args": []any{"a", "b"}, "run_name": "r", "world_size": 4, "storage_path": "/data",
			"rendezvous": map[string]any{"backend": "embedded", "address": "h:1", "timeout": "5m"}, "checkpoint": map[string]any{"num_to_keep": 3}}),
		toCty(map[string]any{"f": 1.5, "neg": -70000, "big": 1 << 40, "t": true, "n": nil, "s": string(bytes.Repeat([]byte("x"), 70000))}),
		cty.ListVal([]cty.Value{cty.NumberIntVal(-1), cty.NumberIntVal(200), cty.NumberIntVal(-200), cty.NumberIntVal(1 << 20)}),
		cty.MapVal(map[string]cty.Value{"a": cty.UnknownVal(cty.String), "b": cty.StringVal("x")}),
		cty.DynamicVal,
		cty.NullVal(cty.String),
	}
	for _, v := range vals {
		for _, ty := range []cty.Type{v.Type(), cty.DynamicPseudoType} {
			t.Run(ty.FriendlyName(), func(t *testing.T) {
				b, err := ctymsgpack.Marshal(v, ty)
				must.NoError(t, err)
				must.NoError(t, checkMsgpack(b))
				for i := range len(b) {
					must.Error(t, checkMsgpack(b[:i]), must.Sprintf("prefix of %d bytes accepted", i))
				}
			})
		}
	}
}

// TestDecodeTaskConfigBoundsNumberText: numbers that cost time to parse or
// print are refused before they do. Before, a megabyte of digits took 10 s
// to parse and 1e-99999 12 s to print in the error.
func TestDecodeTaskConfigBoundsNumberText(t *testing.T) {
	cases := []struct {
		name, worldSize, want string
	}{
		{"a megabyte of digits", "1" + strings.Repeat("0", 1<<20), "a string of 1048577 characters"},
		{"tiny exponent", "1e-99999", "number is out of range"},
		{"huge exponent", "1e99999", "number is out of range"},
		{"fraction still named", "0.5", "a whole number is required, got 0.5"},
		{"big but printable", "1e19", "number 1e+19 is out of range"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := mustEncodeTaskConfig(t, map[string]any{"command": "/bin/true", "run_name": "r", "world_size": c.worldSize, "storage_path": "/d"})
			_, err := DecodeTaskConfig(b)
			must.ErrorContains(t, err, c.want)
		})
	}
}

// FuzzCheckMsgpack: whatever the bound lets through, cty's decoder takes
// without a panic or an allocation out of proportion (the bound exists
// because it trusts declared lengths).
func FuzzCheckMsgpack(f *testing.F) {
	f.Add(hugeArray())
	f.Add([]byte{0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0xd4, 0x00, 0x00})
	for _, v := range []cty.Value{
		toCty(map[string]any{"command": "/bin/true", "args": []any{"a", 1.5, -3}, "world_size": "12", "rendezvous": map[string]any{"backend": "embedded"}}),
		cty.MapVal(map[string]cty.Value{"a": cty.UnknownVal(cty.String)}),
		cty.DynamicVal,
	} {
		b, err := ctymsgpack.Marshal(v, cty.DynamicPseudoType)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if checkMsgpack(b) != nil {
			return
		}
		ty, err := ctymsgpack.ImpliedType(b)
		if err != nil {
			return
		}
		_, _ = ctymsgpack.Unmarshal(b, ty)
		_, _ = ctymsgpack.Unmarshal(b, cty.DynamicPseudoType)
	})
}
