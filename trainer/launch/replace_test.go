package launch

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// crashLoopWorker joins the run's rendezvous as a worker does (and says so
// in its events file). Rank 1's first process then dies, breaking the
// gang; every later process of rank 1 dies before it joins, as a worker
// does that cannot start on its host. The other ranks rejoin and wait to
// be stopped.
func crashLoopWorker(rank int) int {
	marker := filepath.Join(os.Getenv("LOCAL_TEST_PIDS"), "rank1-joined")
	if _, err := os.Stat(marker); rank == 1 && err == nil {
		return workerenv.ExitInfraError
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-term; cancel() }()
	secret, err := os.ReadFile(os.Getenv(workerenv.SecretFile))
	if err != nil {
		return 2
	}
	addr := strings.TrimPrefix(os.Getenv(workerenv.Rendezvous), "embedded://")
	c, err := rendezvous.Dial(ctx, addr, secret, nil)
	if err != nil {
		return workerenv.ExitInfraError
	}
	defer c.Close()
	events, _ := os.OpenFile(os.Getenv(workerenv.Events), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	for ctx.Err() == nil {
		s, err := rendezvous.Join(ctx, c, os.Getenv(workerenv.RunName), rendezvous.Member{
			ID: os.Getenv(workerenv.MemberID), Node: "n", Addr: fmt.Sprintf("127.0.0.1:%d", 1000+rank), RankHint: rank,
		}, rendezvous.Fixed(2), rendezvous.Options{})
		if err != nil {
			break
		}
		ev, _ := json.Marshal(workerenv.Event{Kind: "rendezvous_complete"})
		events.Write(append(ev, '\n'))
		if rank == 1 {
			os.WriteFile(marker, nil, 0o644)
			return workerenv.ExitInfraError
		}
		<-s.WatchLoss(ctx)
	}
	return 0
}

// Replacements that fail before they rejoin the gang count against the
// failure budget, and each waits longer than the last. They used to be
// free and immediate: a worker that could not start on its host was
// replaced about 56 times a second for as long as the run lasted.
func TestReplacementsThatNeverJoinCount(t *testing.T) {
	o, out, pids := opts(t, "crashloop", 2)
	o.MaxFailures = 3
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Launch(ctx, o)
	must.NoError(t, err)
	must.NoError(t, ctx.Err(), must.Sprint("the launcher was still replacing workers at the deadline"))
	must.True(t, res.Failed())
	// One failure broke the gang (generation 2); three replacements
	// never joined it: the fourth failure is one more than max_failures.
	must.Eq(t, "failure budget exhausted: the gang failed 4 times, max_failures is 3", res.BudgetExhausted,
		must.Sprint(out.String()))
	must.SliceLen(t, 3, res.Restarts, must.Sprint(out.String()))
	must.Eq(t, 3, res.Ranks[1].Restarts)

	var delays []string
	for _, m := range regexp.MustCompile(`rank 1 failed: .*; starting a replacement in (\S+)\n`).FindAllStringSubmatch(out.String(), -1) {
		delays = append(delays, m[1])
	}
	must.Eq(t, []string{"100ms", "200ms", "400ms"}, delays)
	noneLeft(t, pids)
}

func TestReplaceDelay(t *testing.T) {
	cases := []struct {
		quick int
		want  time.Duration
	}{
		{0, 100 * time.Millisecond},
		{1, 200 * time.Millisecond},
		{2, 400 * time.Millisecond},
		{6, 6400 * time.Millisecond},
		{7, 10 * time.Second},
		{1000, 10 * time.Second},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.quick), func(t *testing.T) {
			must.Eq(t, c.want, replaceDelay(c.quick))
		})
	}
}

// A rank's delays start over after a process that ran long enough.
func TestReplacementDelayResetsAfterHealthyRun(t *testing.T) {
	g := &gang{quickFailures: []int{0}}
	must.Eq(t, 100*time.Millisecond, g.replacementDelay(0, time.Second))
	must.Eq(t, 200*time.Millisecond, g.replacementDelay(0, time.Second))
	must.Eq(t, 100*time.Millisecond, g.replacementDelay(0, healthyAfter))
	must.Eq(t, 200*time.Millisecond, g.replacementDelay(0, 0))
}

// The survivors of an elastic gang may complete their smaller generation
// before the launcher reaps the lost worker: that generation is the
// recovery from this loss, not a second one.
func TestBudgetCountsAnElasticRecoveryOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ranks  []string
		within bool
	}{
		{"re-formed without the lost member", []string{"local-0", "local-2"}, true},
		{"still the gang with it: the next generation is a second failure", []string{"local-0", "local-1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := rendezvous.NewMemStore(nil)
			st, err := json.Marshal(rendezvous.State{Generation: 2, Phase: rendezvous.PhaseComplete, WorldSize: 2, Ranks: tc.ranks})
			must.NoError(t, err)
			_, ok, err := mem.CompareAndSet(context.Background(), "r/state", st, 0)
			must.NoError(t, err)
			must.True(t, ok)
			g := &gang{opts: Options{Run: workerenv.Run{Name: "r", MaxFailures: 1}}, store: mem}
			must.Eq(t, tc.within, g.withinBudget(true, 1))
		})
	}
}

// The outcome counts the gang's failures as its workers count them: a
// generation lost with no process to replace (a command worker's own
// child died under its wrapper, and the gang re-formed) is one too, which
// the process replacements alone missed.
func TestOutcomeCountsFailuresAsTheWorkersDo(t *testing.T) {
	for _, tc := range []struct {
		name       string
		generation uint64
		restarts   int
		want       int
	}{
		{"no failure", 1, 0, 0},
		{"a generation lost, no process replaced", 2, 0, 1},
		{"two generations lost, one process replaced", 3, 1, 2},
		{"no rendezvous state: the replacements", 0, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := rendezvous.NewMemStore(nil)
			if tc.generation > 0 {
				st, err := json.Marshal(rendezvous.State{Generation: tc.generation, Phase: rendezvous.PhaseComplete, WorldSize: 1, Ranks: []string{"local-0"}})
				must.NoError(t, err)
				_, ok, err := mem.CompareAndSet(context.Background(), "r/state", st, 0)
				must.NoError(t, err)
				must.True(t, ok)
			}
			g := &gang{opts: Options{Run: workerenv.Run{Name: "r", MaxFailures: 5}}, store: mem,
				restarts: make([]RankOutcome, tc.restarts)}
			must.Eq(t, tc.want, g.outcome(t.TempDir()).FailuresUsed)
		})
	}
}
