package workerenv

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// getenvOf is a getenv over KEY=VALUE pairs; a later pair wins.
func getenvOf(kvs []string) func(string) string {
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

// full is an Env with every field away from its default.
func full() Env {
	return Env{
		RunName: "r", WorldSize: 4, RankHint: 2, MemberID: "alloc.task", Node: "n1", Addr: "10.0.0.1:7000",
		Rendezvous: "consul://ns/job", RendezvousTimeout: 90 * time.Second, ConsulOutageGrace: 3 * time.Minute,
		StoragePath: "s3://bucket/results", StorageEndpoint: "http://127.0.0.1:9000", StorageRegion: "eu-west-1", StoragePathStyle: true,
		Config: json.RawMessage(`{"lr":0.1}`), Checkpoint: CheckpointPolicy{NumToKeep: 2, ScoreAttribute: "loss", ScoreOrder: "min"},
		MaxFailures: -1, Builtin: "quickstart", Events: "/alloc/events.jsonl", SecretFile: "/secrets/s",
		CollectiveTimeout: 45 * time.Second, CollectiveTCPOnly: true, FsyncCheckpointsOnly: true,
		MetricsAddr: "127.0.0.1:9100", TorchPort: 23456, StopGrace: 3 * time.Second, LeaseTTL: 7 * time.Second, StorageOutageGrace: 45 * time.Second, StorageStallTimeout: 20 * time.Second, StallFloor: time.Minute, StallFactor: 12.5,
		Mounts: []Mount{{Destination: "/mnt/shared", HostPath: "/srv/nfs"}},
	}
}

func TestEnvironRoundTrip(t *testing.T) {
	e := full()
	got, err := Load(getenvOf(e.Environ()))
	must.NoError(t, err)
	must.Eq(t, e, got)
}

// Every field of Env reaches Environ: a field added to Env and Load but
// not to Environ fails here, whatever its type.
func TestEnvironCoversEveryField(t *testing.T) {
	base := full()
	v := reflect.ValueOf(&base).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		t.Run(name, func(t *testing.T) {
			changed := full()
			f := reflect.ValueOf(&changed).Elem().Field(i)
			switch f.Kind() {
			case reflect.String:
				if name == "MetricsAddr" { // host:port
					f.SetString("127.0.0.1:9200")
				} else {
					f.SetString(f.String() + "x")
				}
			case reflect.Int, reflect.Int64:
				if f.Type() == reflect.TypeOf(time.Duration(0)) {
					f.SetInt(f.Int() + int64(time.Second))
				} else {
					f.SetInt(f.Int() + 1)
				}
			case reflect.Bool:
				f.SetBool(!f.Bool())
			case reflect.Float64:
				f.SetFloat(f.Float() + 1)
			case reflect.Slice: // Config, Mounts
				if name == "Mounts" {
					f.Set(reflect.Append(f, reflect.ValueOf(Mount{Destination: "/data", HostPath: "/srv/data", ReadOnly: true})))
				} else {
					f.SetBytes([]byte(`{"lr":0.2}`))
				}
			case reflect.Struct: // Checkpoint
				f.Field(0).SetInt(f.Field(0).Int() + 1)
			default:
				t.Fatalf("field %s of kind %s: teach this test to change it", name, f.Kind())
			}
			must.NotEq(t, base.Environ(), changed.Environ(), must.Sprintf("Environ ignores %s", name))
			got, err := Load(getenvOf(changed.Environ()))
			must.NoError(t, err)
			must.Eq(t, changed, got)
		})
	}
}

// Whatever environment Load accepts, Environ writes it back so that Load
// reads the same Env again.
func FuzzEnvironInvertsLoad(f *testing.F) {
	f.Add(strings.Join(full().Environ(), "\n"))
	f.Add(RunName + "=r")
	f.Add(RunName + "=r\n" + WorldSize + "=4\n" + MinWorldSize + "=2\n" + Settle + "=1500ms")
	f.Add(RunName + "=r\n" + Mounts + `=[{"destination":"/d","host_path":"/h","read_only":true,"x":1}]`)
	f.Add(RunName + "=r\n" + Mounts + "=[]")
	f.Add(RunName + "=r\n" + WorldSize + "=3\n" + CollectiveTransport + "=SHM\n" + StallFactor + "=1e1\n" + Config + "=[1, 2]")
	f.Fuzz(func(t *testing.T, text string) {
		e, err := Load(getenvOf(strings.Split(text, "\n")))
		if err != nil {
			return
		}
		again, err := Load(getenvOf(e.Environ()))
		if err != nil {
			t.Fatalf("Load refuses what Environ wrote for %+v: %v", e, err)
		}
		if !reflect.DeepEqual(e, again) {
			t.Fatalf("round trip changed the Env:\n%+v\n%+v", e, again)
		}
	})
}
