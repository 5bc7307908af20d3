package main

import (
	"sort"
	"strings"
)

// A Rule forbids packages matching From to depend, directly or through
// other packages, on packages matching To. Patterns are module-relative
// import paths ("trainer/..." for a folder and everything under it, "trainspec"
// for one package) or full import paths of other modules.
type Rule struct {
	From, To []string
	// Except are dependencies matching To that are allowed all the same.
	Except []string
	Why    string
	// Tests applies the rule to the packages' tests too; layer rules hold
	// for what ships, and a test may reach across layers to drive a run.
	Tests bool
}

// layers are the project's rules (ARCHITECTURE.md draws them).
var layers = []Rule{
	{
		From:   []string{"..."},
		To:     []string{"github.com/hashicorp/nomad/...", "github.com/hashicorp/consul/..."},
		Except: []string{"github.com/hashicorp/nomad/api/...", "github.com/hashicorp/consul/api/..."},
		Why:    "the Nomad module and the Consul server are not under an open-source licence: use nomad/api and consul/api",
		Tests:  true,
	},
	{
		From: []string{"trainer/..."},
		To:   []string{"scheduler/...", "driver/...", "trainspec/...", "cmd/...", "examples/...", "builtins/..."},
		Why:  "the runtime is closed: launchers and the spec language sit above it",
	},
	{
		From:   []string{"trainer/workerenv/..."},
		To:     []string{"..."},
		Except: []string{"internal/..."},
		Why:    "the worker contract is a leaf: it imports only leaf helpers",
	},
	{
		From:   []string{"trainspec/..."},
		To:     []string{"..."},
		Except: []string{"internal/...", "trainer/workerenv"},
		Why:    "the spec language is a leaf: it imports only leaf helpers and the worker contract it compiles to",
	},
	{
		From: []string{"driver/..."},
		To:   []string{"examples/...", "builtins/...", "trainer/nn/...", "scheduler/tune/...", "cmd/..."},
		Why:  "the task driver runs as root on every client: it carries no training code of its own",
	},
	{
		From: []string{"scheduler/...", "driver/...", "trainer/...", "trainspec/...", "internal/...", "builtins/...", "examples/..."},
		To:   []string{"scheduler/console/..."},
		Why:  "scheduler/console is what the CLI prints: only cmd/ calls it",
	},
	{
		From: []string{"scheduler/...", "driver/...", "trainer/...", "trainspec/...", "internal/..."},
		To:   []string{"cmd/..."},
		Why:  "cmd/ only wires: nothing imports it",
	},
}

// Package is one package of the module as go list describes it.
type Package struct {
	ImportPath string
	Imports    []string
}

// Violation is a dependency a rule forbids, with the chain of imports that
// makes it.
type Violation struct {
	Rule  Rule
	From  string
	To    string
	Chain []string // From, ..., To
}

func (v Violation) String() string {
	return strings.Join(v.Chain, " -> ") + ": " + v.Rule.Why
}

// Check returns every forbidden dependency of the module's packages, one
// per (package, rule, forbidden package), with the shortest import chain.
// module is the module path; patterns without a host are relative to it.
func Check(module string, pkgs []Package, rules []Rule) []Violation {
	imports := map[string][]string{}
	for _, p := range pkgs {
		imports[p.ImportPath] = p.Imports
	}
	var out []Violation
	for _, p := range pkgs {
		path, test := strings.CutSuffix(p.ImportPath, ".test")
		if i := strings.Index(path, " ["); i >= 0 {
			path, test = path[:i], true
		}
		for _, r := range rules {
			if (test && !r.Tests) || !matchAny(module, path, r.From) {
				continue
			}
			forbidden := func(dep string) bool {
				return dep != path && matchAny(module, dep, r.To) && !matchAny(module, dep, r.Except)
			}
			// A package the rule also covers reports its own violations.
			covered := func(dep string) bool { return matchAny(module, dep, r.From) }
			for _, chain := range chainsTo(p.ImportPath, imports, forbidden, covered) {
				out = append(out, Violation{Rule: r, From: path, To: chain[len(chain)-1], Chain: trim(module, chain)})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// chainsTo walks the imports from start breadth first and returns, for each
// package that forbidden matches, the shortest chain of imports to it. The
// walk goes through neither a forbidden package nor a covered one: their
// own imports are their own violations.
func chainsTo(start string, imports map[string][]string, forbidden, covered func(string) bool) [][]string {
	prev := map[string]string{start: ""}
	queue := []string{start}
	var found [][]string
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, dep := range imports[cur] {
			if _, seen := prev[dep]; seen {
				continue
			}
			prev[dep] = cur
			if forbidden(dep) {
				var chain []string
				for n := dep; n != ""; n = prev[n] {
					chain = append([]string{n}, chain...)
				}
				found = append(found, chain)
				continue
			}
			if !covered(dep) {
				queue = append(queue, dep)
			}
		}
	}
	return found
}

// matchAny reports whether path matches one of the patterns.
func matchAny(module, path string, patterns []string) bool {
	for _, p := range patterns {
		if match(module, path, p) {
			return true
		}
	}
	return false
}

// match matches an import path against a pattern: "x/..." is x and
// everything under it, "..." every package of the module, anything else
// the one package. A pattern whose first element has no dot is relative to
// the module.
func match(module, path, pattern string) bool {
	if pattern == "..." {
		return path == module || strings.HasPrefix(path, module+"/")
	}
	if first, _, _ := strings.Cut(pattern, "/"); !strings.Contains(first, ".") {
		pattern = module + "/" + pattern
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

// trim writes the module's own packages relative to it.
func trim(module string, chain []string) []string {
	out := make([]string, len(chain))
	for i, p := range chain {
		out[i] = strings.TrimPrefix(p, module+"/")
	}
	return out
}
