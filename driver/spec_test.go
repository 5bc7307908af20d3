package driver

import (
	"encoding/hex"
	"testing"

	"github.com/shoenig/test/must"
	"github.com/zclconf/go-cty/cty"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"
	"google.golang.org/protobuf/proto"

	"github.com/nomad-train/nomad-train/driver/proto/hclspec"
)

// Vectors from the reference file nomad-cty-msgpack-vectors.md: the spec as
// Nomad's client would receive it (protobuf), the cty type Nomad derives
// from it, and the exact msgpack bytes Nomad sends for a sample config.
var msgpackVectors = []struct {
	name     string
	specHex  string
	msgpack  string
	wantType cty.Type
	want     cty.Value
}{
	{
		name:     "raw_exec-like command+args",
		specHex:  "0a420a200a07636f6d6d616e6412151a130a07636f6d6d616e641206737472696e6718010a1e0a046172677312161a140a0461726773120c6c69737428737472696e6729",
		msgpack:  "82a46172677392a22d63a66563686f2074a7636f6d6d616e64a72f62696e2f7368",
		wantType: cty.Object(map[string]cty.Type{"args": cty.List(cty.String), "command": cty.String}),
		want: cty.ObjectVal(map[string]cty.Value{
			"args":    cty.ListVal([]cty.Value{cty.StringVal("-c"), cty.StringVal("echo t")}),
			"command": cty.StringVal("/bin/sh"),
		}),
	},
	{
		name:     "args omitted is null",
		specHex:  "0a420a200a07636f6d6d616e6412151a130a07636f6d6d616e641206737472696e6718010a1e0a046172677312161a140a0461726773120c6c69737428737472696e6729",
		msgpack:  "82a461726773c0a7636f6d6d616e64a92f62696e2f74727565",
		wantType: cty.Object(map[string]cty.Type{"args": cty.List(cty.String), "command": cty.String}),
		want: cty.ObjectVal(map[string]cty.Value{
			"args":    cty.NullVal(cty.List(cty.String)),
			"command": cty.StringVal("/bin/true"),
		}),
	},
	{
		name:    "mixed defaults number map block blocklist",
		specHex: "0af0010a2b0a07656e61626c656412204a1e0a111a0f0a07656e61626c65641204626f6f6c120952070a0566616c73650a1e0a07776f726b65727312131a110a07776f726b65727312066e756d6265720a140a026c72120e1a0c0a026c7212066e756d6265720a1b0a03656e7612141a120a03656e76120b6d617028737472696e67290a380a097265736f7572636573122b22290a097265736f75726365731a1c0a1a0a180a046770757312101a0e0a046770757312066e756d6265720a340a06766f6c756d65122a32280a06766f6c756d65221e0a1c0a1a0a047061746812121a100a04706174681206737472696e671801",
		msgpack: "86a7656e61626c6564c2a3656e7681a141a131a26c72a5302e303031a97265736f757263657381a46770757302a6766f6c756d659281a470617468a52f6461746181a470617468a52f636b7074a7776f726b65727304",
		wantType: cty.Object(map[string]cty.Type{
			"enabled":   cty.Bool,
			"env":       cty.Map(cty.String),
			"lr":        cty.Number,
			"resources": cty.Object(map[string]cty.Type{"gpus": cty.Number}),
			"volume":    cty.List(cty.Object(map[string]cty.Type{"path": cty.String})),
			"workers":   cty.Number,
		}),
		want: cty.ObjectVal(map[string]cty.Value{
			"enabled":   cty.False,
			"env":       cty.MapVal(map[string]cty.Value{"A": cty.StringVal("1")}),
			"lr":        cty.MustParseNumberVal("0.001"),
			"resources": cty.ObjectVal(map[string]cty.Value{"gpus": cty.NumberIntVal(2)}),
			"volume": cty.ListVal([]cty.Value{
				cty.ObjectVal(map[string]cty.Value{"path": cty.StringVal("/data")}),
				cty.ObjectVal(map[string]cty.Value{"path": cty.StringVal("/ckpt")}),
			}),
			"workers": cty.NumberIntVal(4),
		}),
	},
	{
		name:     "numbers int float and decimal strings",
		specHex:  "0a500a120a0161120d1a0b0a016112066e756d6265720a120a0162120d1a0b0a016212066e756d6265720a120a0163120d1a0b0a016312066e756d6265720a120a0164120d1a0b0a016412066e756d626572",
		msgpack:  "84a161cb3fe0000000000000a16202a163b5313030303030303030303030303030303030303030a164f9",
		wantType: cty.Object(map[string]cty.Type{"a": cty.Number, "b": cty.Number, "c": cty.Number, "d": cty.Number}),
		want: cty.ObjectVal(map[string]cty.Value{
			"a": cty.NumberFloatVal(0.5),
			"b": cty.NumberIntVal(2),
			"c": cty.MustParseNumberVal("100000000000000000000"),
			"d": cty.NumberIntVal(-7),
		}),
	},
}

func TestMsgpackVectors(t *testing.T) {
	for _, tc := range msgpackVectors {
		t.Run(tc.name, func(t *testing.T) {
			specBytes, err := hex.DecodeString(tc.specHex)
			must.NoError(t, err)
			var spec hclspec.Spec
			must.NoError(t, proto.Unmarshal(specBytes, &spec))

			ty, err := impliedType(&spec)
			must.NoError(t, err)
			must.True(t, ty.Equals(tc.wantType), must.Sprintf("implied type %#v", ty))

			b, err := hex.DecodeString(tc.msgpack)
			must.NoError(t, err)
			got, err := decodeMsgpack(&spec, b)
			must.NoError(t, err)
			must.True(t, got.RawEquals(tc.want) || got.Equals(tc.want).True(), must.Sprintf("got %#v", got))

			// Our encoder side (used by the tests to play the Nomad client)
			// must produce exactly Nomad's bytes.
			again, err := ctymsgpack.Marshal(tc.want, tc.wantType)
			must.NoError(t, err)
			must.Eq(t, tc.msgpack, hex.EncodeToString(again))
		})
	}
}

func TestDecodeMsgpackErrorsNameTheField(t *testing.T) {
	spec := specObject(map[string]*hclspec.Spec{
		"n":     specAttr("n", "number", true),
		"flag":  specAttr("flag", "bool", false),
		"inner": specBlock("inner", specObject(map[string]*hclspec.Spec{"s": specAttr("s", "string", true)})),
	})
	enc := func(v map[string]cty.Value) []byte {
		val := cty.ObjectVal(v)
		b, err := ctymsgpack.Marshal(val, val.Type())
		must.NoError(t, err)
		return b
	}
	cases := []struct {
		name  string
		in    []byte
		field string
	}{
		{"missing required", enc(map[string]cty.Value{"flag": cty.True}), "n"},
		{"wrong type", enc(map[string]cty.Value{"n": cty.StringVal("many")}), "n"},
		{"bool for number", enc(map[string]cty.Value{"n": cty.True}), "n"},
		{"unknown field", enc(map[string]cty.Value{"n": cty.NumberIntVal(1), "nn": cty.NumberIntVal(2)}), "nn"},
		{"unknown nested", enc(map[string]cty.Value{"n": cty.NumberIntVal(1), "inner": cty.ObjectVal(map[string]cty.Value{"s": cty.StringVal("x"), "zz": cty.True})}), "inner.zz"},
		{"missing nested required", enc(map[string]cty.Value{"n": cty.NumberIntVal(1), "inner": cty.ObjectVal(map[string]cty.Value{"s": cty.NullVal(cty.String)})}), "inner.s"},
		{"list for block", enc(map[string]cty.Value{"n": cty.NumberIntVal(1), "inner": cty.TupleVal([]cty.Value{cty.True})}), "inner"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeMsgpack(spec, tc.in)
			var ce *ConfigError
			must.ErrorAs[*ConfigError](t, err, &ce)
			must.Eq(t, tc.field, ce.Field, must.Sprint(err))
		})
	}
}
