package rendezvous_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// Environment of the child processes of TestMultiProcess.
const (
	envChild  = "RDZV_WANT_HELPER_PROCESS"
	envURI    = "RDZV_URI"
	envSecret = "RDZV_SECRET"
	envID     = "RDZV_ID"
	envHint   = "RDZV_HINT"
	envWorld  = "RDZV_WORLD"
)

// childLine is what a child prints: its assignment, then its loss.
type childLine struct {
	Kind    string                `json:"kind"` // "assign" or "lost"
	Assign  rendezvous.Assignment `json:"assign"`
	Reason  string                `json:"reason,omitempty"`
	Missing []string              `json:"missing,omitempty"`
}

// TestMultiProcessChild is the body of a child process; it does nothing in
// a normal test run.
func TestMultiProcessChild(t *testing.T) {
	if os.Getenv(envChild) != "1" {
		t.Skip("helper process for TestMultiProcess")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hint, _ := strconv.Atoi(os.Getenv(envHint))
	world, _ := strconv.Atoi(os.Getenv(envWorld))
	st, err := rendezvous.Open(ctx, os.Getenv(envURI), []byte(os.Getenv(envSecret)), nil)
	must.NoError(t, err)
	defer st.Close()
	id := os.Getenv(envID)
	me := rendezvous.Member{ID: id, Node: "host-" + strconv.Itoa(hint/2), Addr: "127.0.0.1:" + strconv.Itoa(20000+hint), RankHint: hint}
	s, err := rendezvous.Join(ctx, st, "multiprocess", me, rendezvous.Fixed(world), rendezvous.Options{Timeout: 30 * time.Second})
	must.NoError(t, err)
	out := json.NewEncoder(os.Stdout)
	must.NoError(t, out.Encode(childLine{Kind: "assign", Assign: s.Assignment()}))
	ev, ok := <-s.WatchLoss(ctx)
	must.True(t, ok, must.Sprint("no loss observed"))
	must.NoError(t, out.Encode(childLine{Kind: "lost", Reason: string(ev.Reason), Missing: ev.Missing}))
	must.NoError(t, s.Leave(ctx))
}

type child struct {
	cmd   *exec.Cmd
	lines chan childLine
}

func startChild(t *testing.T, uri string, secret []byte, i, world int) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMultiProcessChild$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		envChild+"=1", envURI+"="+uri, envSecret+"="+string(secret),
		envID+"="+fmt.Sprintf("w%d", i), envHint+"="+strconv.Itoa(i), envWorld+"="+strconv.Itoa(world))
	stdout, err := cmd.StdoutPipe()
	must.NoError(t, err)
	cmd.Stderr = os.Stderr
	must.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	c := &child{cmd: cmd, lines: make(chan childLine, 4)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l childLine
			if strings.HasPrefix(sc.Text(), "{") && json.Unmarshal(sc.Bytes(), &l) == nil {
				c.lines <- l
			}
		}
		close(c.lines)
	}()
	return c
}

func (c *child) next(t *testing.T, kind string) childLine {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatalf("child %d ended before its %s line", c.cmd.Process.Pid, kind)
		}
		must.Eq(t, kind, l.Kind)
		return l
	case <-time.After(45 * time.Second):
		t.Fatalf("child %d printed no %s line", c.cmd.Process.Pid, kind)
	}
	return childLine{}
}

// Four processes rendezvous through a server in this one over real TCP;
// one is killed with SIGKILL and the others see it lost.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	const world = 4
	st := rendezvous.NewMemStore(nil)
	t.Cleanup(func() { st.Close() })
	addr := serve(t, st, testSecret, nil)
	children := make([]*child, world)
	for i := range children {
		children[i] = startChild(t, "embedded://"+addr, testSecret, i, world)
	}
	var peers []rendezvous.Member
	for i, c := range children {
		a := c.next(t, "assign").Assign
		must.Eq(t, i, a.Rank, must.Sprint("rank hint not honoured"))
		must.Eq(t, world, a.WorldSize)
		must.Eq(t, i%2, a.LocalRank)
		must.Eq(t, i/2, a.NodeRank)
		if peers == nil {
			peers = a.Peers
		}
		must.Eq(t, peers, a.Peers)
	}

	victim := children[world-1]
	must.NoError(t, victim.cmd.Process.Kill()) // SIGKILL
	_ = victim.cmd.Wait()
	for _, c := range children[:world-1] {
		l := c.next(t, "lost")
		must.Eq(t, string(rendezvous.ReasonMemberLost), l.Reason)
		// A survivor that noticed first may already have left too.
		must.SliceContains(t, l.Missing, fmt.Sprintf("w%d", world-1))
		must.NoError(t, c.cmd.Wait())
	}
}
