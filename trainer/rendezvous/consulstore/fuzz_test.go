package consulstore_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore"
)

// FuzzStoreResponses: whatever an agent (or whatever answers at its
// address) sends back, the store's calls return a value or an error; none
// panics, and none reports a write that the answer did not confirm.
func FuzzStoreResponses(f *testing.F) {
	kv := `[{"Key":"p/k","CreateIndex":11,"ModifyIndex":12,"LockIndex":0,"Flags":0,"Value":"dg==","Session":""}]`
	f.Add(uint8(0), "12", kv)
	f.Add(uint8(0), "13", `{"Results":[{"KV":{"Key":"p/k","ModifyIndex":13}}],"Errors":null}`)
	f.Add(uint8(2), "13", `{"Results":null,"Errors":[{"OpIndex":0,"What":"failed to set key \"p/k\", index is stale"}]}`)
	f.Add(uint8(0), "14", `{"ID":"adf4238a-882b-9ddc-4a9d-5b6758e4159e"}`)
	f.Add(uint8(0), "14", `[{"ID":"adf4238a-882b-9ddc-4a9d-5b6758e4159e","TTL":"10s","Behavior":"delete"}]`)
	f.Add(uint8(1), "1", ``)
	f.Add(uint8(3), "x", `No cluster leader`)
	f.Add(uint8(0), "18446744073709551615", `true`)
	f.Add(uint8(0), "", ``)
	f.Add(uint8(1), "5", `[`)
	f.Add(uint8(0), "5", `{}`)
	f.Add(uint8(2), "12", `[]`)
	statuses := []int{http.StatusOK, http.StatusNotFound, http.StatusConflict, http.StatusInternalServerError}
	f.Fuzz(func(t *testing.T, status uint8, index, body string) {
		answer := answerWith{status: statuses[int(status)%len(statuses)], index: index, body: body}
		conf := capi.DefaultConfig()
		conf.Address = "agent.invalid:8500"
		conf.HttpClient = &http.Client{Transport: answer}
		client, err := capi.NewClient(conf)
		if err != nil {
			t.Fatal(err)
		}
		st, err := consulstore.New(consulstore.Config{Client: client, Prefix: "p/", LockDelay: time.Microsecond,
			RequestTimeout: time.Second, WaitTime: 100 * time.Millisecond, ErrorGrace: time.Millisecond, MinTTL: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st.Get(ctx, "k")
		st.List(ctx, "")
		if v, ok, err := st.CompareAndSet(ctx, "k", []byte("v"), 12); err == nil && ok && string(v.Data) != "v" {
			t.Fatalf("compare-and-set reported a write of %q", v.Data)
		}
		st.Txn(ctx, []rendezvous.TxnOp{{Kind: rendezvous.TxnCheck, Key: "s", Version: 3}, {Kind: rendezvous.TxnList, Key: "g/"}})
		wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		st.WaitPrefix(wctx, "", 5)
		wcancel()
		if l, err := st.Grant(ctx, time.Second); err == nil {
			l.Renew(ctx)
			st.PutEphemeral(ctx, l, "e", []byte("x"))
		}
	})
}

// answerWith answers every request with the same status, X-Consul-Index
// and body, without a network.
type answerWith struct {
	status      int
	index, body string
}

func (a answerWith) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if a.index != "" {
		h.Set("X-Consul-Index", a.index)
	}
	return &http.Response{StatusCode: a.status, Status: http.StatusText(a.status), Header: h,
		Body: io.NopCloser(strings.NewReader(a.body)), ContentLength: int64(len(a.body)), Request: req}, nil
}
