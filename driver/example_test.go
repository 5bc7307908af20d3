package driver_test

import (
	"fmt"

	"github.com/zclconf/go-cty/cty"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"

	"github.com/nomad-train/nomad-train/driver"
)

// A task's config {} block arrives as cty-msgpack; DecodeTaskConfig checks
// it against the contract and fills the defaults.
func ExampleDecodeTaskConfig() {
	v := cty.ObjectVal(map[string]cty.Value{
		"builtin":      cty.StringVal("quickstart"),
		"run_name":     cty.StringVal("demo"),
		"world_size":   cty.NumberIntVal(4),
		"storage_path": cty.StringVal("/srv/results"),
	})
	b, _ := ctymsgpack.Marshal(v, v.Type())
	tc, err := driver.DecodeTaskConfig(b)
	fmt.Println(tc.Builtin, tc.WorldSize, tc.Rendezvous.Backend, tc.Rendezvous.Timeout, tc.Port, err)

	v = cty.ObjectVal(map[string]cty.Value{"run_name": cty.StringVal("demo")})
	b, _ = ctymsgpack.Marshal(v, v.Type())
	_, err = driver.DecodeTaskConfig(b)
	fmt.Println(err)
	// Output:
	// quickstart 4 consul 5m0s train <nil>
	// decode task config: field "storage_path": required field is missing
}
