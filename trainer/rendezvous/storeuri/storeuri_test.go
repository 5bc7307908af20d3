package storeuri_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore/fakeconsul"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/storeuri"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestConsulConfig(t *testing.T) {
	for _, tc := range []struct {
		uri          string
		addr, prefix string
		bad          bool
	}{
		{uri: "consul://"},
		{uri: "consul://10.0.0.1:8500", addr: "10.0.0.1:8500"},
		{uri: "consul://10.0.0.1:8500/", addr: "10.0.0.1:8500"},
		{uri: "consul:///ml/rdzv", prefix: "ml/rdzv/"},
		{uri: "consul://h:1/ml/rdzv/", addr: "h:1", prefix: "ml/rdzv/"},
		{uri: "consul://user:secret@h:1", bad: true},
		{uri: "consul://h:1?token=x", bad: true},
		{uri: "embedded://h:1", bad: true},
		{uri: "consul://h:1/%zz", bad: true},
		{uri: storeuri.NomadJobURI("", "qs"), prefix: "nomad-train/default/qs/"},
		{uri: storeuri.NomadJobURI("ml", "exp-trial_0001"), prefix: "nomad-train/ml/exp-trial_0001/"},
		{uri: storeuri.NomadJobURI("ml", "a/b c"), prefix: storeuri.NomadJobPrefix("ml", "a/b c")},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			cfg, err := storeuri.ConsulConfig(tc.uri)
			if tc.bad {
				must.Error(t, err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.addr, cfg.Address)
			must.Eq(t, tc.prefix, cfg.Prefix)
		})
	}
}

func TestOpen(t *testing.T) {
	fake := fakeconsul.New(fakeconsul.Options{})
	defer fake.Close()
	mem := rendezvous.NewMemStore(nil)
	defer mem.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	srv, err := rendezvous.NewServer(mem, rendezvous.ServerConfig{Listener: ln, Secret: []byte("s")})
	must.NoError(t, err)
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx) }()
	defer func() { stop(); <-done }()

	t.Run("both backends store and read", func(t *testing.T) {
		for _, uri := range []string{"consul://" + fake.Addr() + "/t/", "embedded://" + srv.Addr()} {
			t.Run(uri, func(t *testing.T) {
				ctx := ctxFor(t, 5*time.Second)
				st, err := storeuri.Open(ctx, uri, []byte("s"), nil)
				must.NoError(t, err)
				defer st.Close()
				v, ok, err := st.CompareAndSet(ctx, "k", []byte("v"), 0)
				must.NoError(t, err)
				must.True(t, ok)
				got, err := st.Get(ctx, "k")
				must.NoError(t, err)
				must.Eq(t, v, got)
			})
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, uri := range []string{"consul://127.0.0.1:1", "consul://h/?x=1", "bogus://h:1", "embedded://"} {
			t.Run(uri, func(t *testing.T) {
				_, err := storeuri.Open(ctxFor(t, 5*time.Second), uri, []byte("s"), nil)
				must.Error(t, err)
			})
		}
	})
}

func TestRegisterHealth(t *testing.T) {
	fake := fakeconsul.New(fakeconsul.Options{})
	defer fake.Close()
	ctx := ctxFor(t, 10*time.Second)
	spec := storeuri.HealthSpec{Service: "nomad-train", ID: "run-w0", Addr: "127.0.0.1", Port: 1234, TTL: time.Minute}

	hb, err := storeuri.RegisterHealth(ctx, "consul://"+fake.Addr(), spec, nil)
	must.NoError(t, err)
	_, ok := fake.Service("run-w0")
	must.True(t, ok)
	hb.Beat(7)
	must.True(t, fakeconsul.WaitFor(ctx, func() bool {
		c, _ := fake.CheckState(consulstore.CheckID("run-w0"))
		return c.Output == "step 7"
	}))
	must.NoError(t, hb.Close(ctx))
	_, ok = fake.Service("run-w0")
	must.False(t, ok)

	nop, err := storeuri.RegisterHealth(ctx, "embedded://127.0.0.1:1", spec, nil)
	must.NoError(t, err)
	nop.Beat(1)
	must.NoError(t, nop.Close(ctx))
}

// Environment of the child processes of TestMultiProcessConsul.
const (
	envChild = "STOREURI_WANT_HELPER_PROCESS"
	envURI   = "STOREURI_URI"
	envIndex = "STOREURI_INDEX"
)

const childWorld = 3

// TestMultiProcessConsulChild is one worker process: it opens the store by
// URI, joins, prints its assignment, and leaves when its stdin closes (or,
// for the last worker, at once, so the others see it go).
func TestMultiProcessConsulChild(t *testing.T) {
	if os.Getenv(envChild) != "1" {
		t.Skip("helper process for TestMultiProcessConsul")
	}
	ctx := ctxFor(t, 60*time.Second)
	i, _ := strconv.Atoi(os.Getenv(envIndex))
	st, err := storeuri.Open(ctx, os.Getenv(envURI), nil, nil)
	must.NoError(t, err)
	defer st.Close()
	me := rendezvous.Member{ID: fmt.Sprintf("w%d", i), Node: "n", Addr: fmt.Sprintf("127.0.0.1:%d", 21000+i), RankHint: rendezvous.NoRankHint}
	s, err := rendezvous.Join(ctx, st, "mp", me, rendezvous.Fixed(childWorld), rendezvous.Options{Timeout: 30 * time.Second})
	must.NoError(t, err)
	out := json.NewEncoder(os.Stdout)
	must.NoError(t, out.Encode(map[string]any{"rank": s.Assignment().Rank}))
	if i == childWorld-1 {
		must.NoError(t, s.Leave(ctx))
		return
	}
	ev := <-s.WatchLoss(ctx)
	must.NoError(t, out.Encode(map[string]any{"lost": ev.Member}))
	// Stay until the parent has heard every survivor, so no one sees this
	// one leave first.
	io.Copy(io.Discard, os.Stdin)
	must.NoError(t, s.Leave(ctx))
}

// TestMultiProcessConsul runs a gang of real processes that meet through
// the Consul protocol (the fake agent) by URI, as workers on Nomad do.
func TestMultiProcessConsul(t *testing.T) {
	fake := fakeconsul.New(fakeconsul.Options{})
	defer fake.Close()
	uri := "consul://" + fake.Addr() + "/mp/"
	type line struct {
		Rank *int   `json:"rank"`
		Lost string `json:"lost"`
	}
	outs := make([]chan line, childWorld)
	for i := range childWorld {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMultiProcessConsulChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), envChild+"=1", envURI+"="+uri, envIndex+"="+strconv.Itoa(i))
		stdout, err := cmd.StdoutPipe()
		must.NoError(t, err)
		stdin, err := cmd.StdinPipe()
		must.NoError(t, err)
		cmd.Stderr = os.Stderr
		must.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		defer stdin.Close()
		outs[i] = make(chan line, 4)
		go func(ch chan line) {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var l line
				if json.Unmarshal(sc.Bytes(), &l) == nil {
					ch <- l
				}
			}
			close(ch)
		}(outs[i])
	}
	next := func(i int) line {
		select {
		case l, ok := <-outs[i]:
			must.True(t, ok, must.Sprintf("worker %d ended early", i))
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("worker %d said nothing", i)
		}
		return line{}
	}
	ranks := make(map[int]bool)
	for i := range childWorld {
		l := next(i)
		must.NotNil(t, l.Rank)
		ranks[*l.Rank] = true
	}
	must.MapLen(t, childWorld, ranks, must.Sprint("ranks not 0..N-1 once each"))
	for i := range childWorld - 1 {
		must.Eq(t, fmt.Sprintf("w%d", childWorld-1), next(i).Lost)
	}
}

// A worker's store and its health check share the process's one Consul
// client, so a host of many workers stays under the agent's per-client
// connection limit.
func TestOneConsulClientPerProcess(t *testing.T) {
	fake := fakeconsul.New(fakeconsul.Options{})
	defer fake.Close()
	ctx := ctxFor(t, 10*time.Second)
	uri := "consul://" + fake.Addr() + "/one/"
	st, err := storeuri.Open(ctx, uri, nil, nil)
	must.NoError(t, err)
	defer st.Close()
	shared, err := consulstore.SharedClient(fake.Addr())
	must.NoError(t, err)
	must.True(t, st.(*consulstore.Store).Client() == shared, must.Sprint("the store built its own client"))
	again, err := storeuri.Open(ctx, uri, nil, nil)
	must.NoError(t, err)
	defer again.Close()
	must.True(t, again.(*consulstore.Store).Client() == shared)
}
