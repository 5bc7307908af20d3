package cliflag

import (
	"bytes"
	"testing"

	"github.com/shoenig/test/must"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name string
		args []string
		pos  []string
		code int
		v    bool
		vars Vars
	}{
		{"flags anywhere", []string{"a", "-v", "b", "-var", "x=1"}, []string{"a", "b"}, -1, true, Vars{"x": "1"}},
		{"help", []string{"-h"}, nil, ExitOK, false, Vars{}},
		{"unknown flag", []string{"-nope"}, nil, ExitUsage, false, Vars{}},
		{"bad var", []string{"-var", "novalue"}, nil, ExitUsage, false, Vars{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var errb bytes.Buffer
			fs := NewSet("x", "x [flags]", &errb)
			v := fs.Bool("v", false, "")
			vars := Vars{}
			fs.Var(vars, "var", "")
			pos, code := Parse(fs, c.args)
			must.Eq(t, c.code, code)
			must.Eq(t, c.pos, pos)
			must.Eq(t, c.v, *v)
			must.Eq(t, c.vars, vars)
		})
	}
}

func TestParseOne(t *testing.T) {
	var errb bytes.Buffer
	path, code := ParseOne(NewSet("run", "run x", &errb), []string{"a.hcl"}, &errb)
	must.Eq(t, -1, code)
	must.Eq(t, "a.hcl", path)
	_, code = ParseOne(NewSet("run", "run x", &errb), []string{"a.hcl", "b.hcl"}, &errb)
	must.Eq(t, ExitUsage, code)
	must.StrContains(t, errb.String(), "nomad-train run: want one spec file, got 2 arguments\nUsage: nomad-train run x")
}
