package executor

import (
	"errors"
	"fmt"
	"testing"

	"github.com/shoenig/test/must"
)

const statCat = "27231 (cat) R 27224 27224 3838 0 -1 4194304 100 0 0 0 7 3 0 0 20 0 1 0 112974 3133440 388 18446744073709551615 94614661836800 94614661856681 140731523278832 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 94614661872688 94614661874304 94615030734848 140731523287519 140731523287539 140731523287539 140731523289067 0\n"

func TestParseProcStat(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want procStat
		bad  bool
	}{
		{name: "plain", in: statCat, want: procStat{PID: 27231, PPID: 27224, PGRP: 27224, State: 'R', UTime: 7, STime: 3, StartTime: 112974, RSSPages: 388}},
		{name: "name with spaces and parens", in: "42 (a) (b c)) S 1 42 42 0 -1 0 0 0 0 0 11 22 0 0 20 0 1 0 999 0 5 0",
			want: procStat{PID: 42, PPID: 1, PGRP: 42, State: 'S', UTime: 11, STime: 22, StartTime: 999, RSSPages: 5}},
		{name: "zombie", in: "7 (x) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0",
			want: procStat{PID: 7, PPID: 1, PGRP: 7, State: 'Z', StartTime: 5}},
		{name: "truncated", in: "7 (x) S 1 7 7", bad: true},
		{name: "no name", in: "7 x S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0", bad: true},
		{name: "bad pid", in: "x7 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0", bad: true},
		{name: "bad number", in: "7 (x) S 1 7 7 0 -1 0 0 0 0 0 zz 0 0 0 20 0 1 0 5 0 0", bad: true},
		{name: "empty", in: "", bad: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat(tc.in)
			if tc.bad {
				must.True(t, errors.Is(err, errProcFormat), must.Sprintf("err = %v", err))
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
		})
	}
}

func TestParseProcStatusMem(t *testing.T) {
	cases := []struct {
		name      string
		in        string
		rss, swap uint64
		hasSwap   bool
		bad       bool
	}{
		{name: "process", in: "Name:\tcat\nVmPeak:\t 9000 kB\nVmRSS:\t    2172 kB\nVmSwap:\t       3 kB\nThreads:\t1\n", rss: 2172 << 10, swap: 3 << 10, hasSwap: true},
		{name: "kernel thread", in: "Name:\tkworker\nThreads:\t1\n"},
		{name: "bad unit", in: "VmRSS:\t12 MB\n", bad: true},
		{name: "bad number", in: "VmRSS:\tx kB\n", bad: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rss, swap, has, err := parseProcStatusMem(tc.in)
			if tc.bad {
				must.ErrorIs(t, err, errProcFormat)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.rss, rss)
			must.Eq(t, tc.swap, swap)
			must.Eq(t, tc.hasSwap, has)
		})
	}
}

func TestParseCgroupFiles(t *testing.T) {
	t.Run("cpu.stat", func(t *testing.T) {
		m, err := parseFlatKeyed("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\nnr_periods 0\n")
		must.NoError(t, err)
		must.Eq(t, map[string]uint64{"usage_usec": 1500000, "user_usec": 1000000, "system_usec": 500000, "nr_periods": 0}, m)
	})
	t.Run("memory.events", func(t *testing.T) {
		m, err := parseFlatKeyed("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n")
		must.NoError(t, err)
		must.Eq(t, 1, m["oom_kill"])
	})
	for _, bad := range []string{"usage_usec\n", "a b c\n", "a -1\n", "a x\n"} {
		_, err := parseFlatKeyed(bad)
		must.ErrorIs(t, err, errProcFormat, must.Sprintf("input %q", bad))
	}
	single := []struct {
		in  string
		v   uint64
		ok  bool
		bad bool
	}{{"1048576\n", 1048576, true, false}, {"max\n", 0, false, false}, {"lots\n", 0, false, true}}
	for _, tc := range single {
		v, ok, err := parseSingleValue(tc.in)
		must.Eq(t, tc.bad, err != nil)
		must.Eq(t, tc.v, v)
		must.Eq(t, tc.ok, ok)
	}
	must.Eq(t, 2400.5, parseCPUInfoMHz("processor\t: 0\ncpu MHz\t\t: 2400.500\ncpu MHz\t\t: 1.0\n"))
	must.Eq(t, 0, parseCPUInfoMHz("processor\t: 0\nBogoMIPS\t: 50.00\n"))
}

func TestTreeOf(t *testing.T) {
	procs := []procStat{
		{PID: 1, PPID: 0, PGRP: 1, State: 'S'},
		{PID: 10, PPID: 5, PGRP: 10, State: 'S'},  // the worker, child of the shim 5
		{PID: 11, PPID: 10, PGRP: 10, State: 'R'}, // child in the group
		{PID: 12, PPID: 11, PGRP: 12, State: 'S'}, // grandchild that left the group
		{PID: 13, PPID: 1, PGRP: 10, State: 'S'},  // reparented group member
		{PID: 14, PPID: 13, PGRP: 14, State: 'S'}, // its child
		{PID: 15, PPID: 10, PGRP: 10, State: 'Z'}, // zombie child
		{PID: 20, PPID: 1, PGRP: 20, State: 'S'},  // unrelated
		{PID: 21, PPID: 20, PGRP: 20, State: 'S'}, // unrelated
	}
	var got []int
	for _, p := range treeOf(10, procs) {
		got = append(got, p.PID)
	}
	must.SliceContainsAll(t, []int{10, 11, 12, 13, 14}, got)
	must.Nil(t, treeOf(99, procs))
}

func TestCPUWeight(t *testing.T) {
	cases := []struct {
		shares int64
		want   uint64
	}{{0, 0}, {-5, 0}, {1, 1}, {2, 1}, {1024, 39}, {262144, 10000}, {1 << 40, 10000}}
	for _, tc := range cases {
		must.Eq(t, tc.want, cpuWeight(tc.shares), must.Sprintf("shares %d", tc.shares))
	}
}

func TestCgroupLimits(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want [][2]string
	}{
		{name: "none", cfg: Config{}},
		{name: "hard from MemoryMB", cfg: Config{CPUShares: 1024, MemoryMB: 256},
			want: [][2]string{{"cpu.weight", "39"}, {"memory.max", "268435456"}}},
		{name: "soft and hard", cfg: Config{MemoryMB: 256, MemoryMaxMB: 512},
			want: [][2]string{{"memory.max", "536870912"}, {"memory.low", "268435456"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.want, cgroupLimits(tc.cfg))
		})
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add(statCat)
	f.Add("42 (a) (b c)) S 1 42 42 0 -1 0 0 0 0 0 11 22 0 0 20 0 1 0 999 0 5 0")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parseProcStat(s)
		if err != nil {
			return
		}
		// What parsed must survive a round trip through the stat format.
		line := fmt.Sprintf("%d (x) %c %d %d 0 0 0 0 0 0 0 0 %d %d 0 0 0 0 0 0 %d 0 %d",
			p.PID, p.State, p.PPID, p.PGRP, p.UTime, p.STime, p.StartTime, p.RSSPages)
		again, err := parseProcStat(line)
		if err != nil || again != p {
			t.Fatalf("round trip of %q: %+v != %+v (%v)", s, again, p, err)
		}
	})
}

func FuzzParseFlatKeyed(f *testing.F) {
	f.Add("usage_usec 1\nuser_usec 2\n")
	f.Add("oom_kill 1")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseFlatKeyed(s)
		if err == nil && m == nil {
			t.Fatal("nil map without error")
		}
	})
}
