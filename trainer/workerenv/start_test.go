package workerenv

import (
	"testing"

	"github.com/shoenig/test/must"
)

func TestStartFor(t *testing.T) {
	goTrainer := func(p string) bool { return p == "/bin/go-trainer" }
	for _, tc := range []struct {
		name string
		ep   Entrypoint
		want Process
		err  string
	}{
		{"builtin", Entrypoint{Builtin: "quickstart"},
			Process{Path: "/self", Args: []string{WorkerArg}, Env: []string{Builtin + "=quickstart"}, Self: true}, ""},
		{"a Go trainer runs itself", Entrypoint{Command: "/bin/go-trainer", Args: []string{"-x"}},
			Process{Path: "/bin/go-trainer", Args: []string{"-x"}}, ""},
		{"python runs under the wrapper", Entrypoint{Command: "/usr/bin/python3", Args: []string{"train.py"}},
			Process{Path: "/self", Args: []string{WorkerArg}, Self: true, External: []string{"/usr/bin/python3", "train.py"},
				Env: []string{Builtin + "=external", ExternalCommand + `=["/usr/bin/python3","train.py"]`}}, ""},
		{"forced wrapper", Entrypoint{Command: "/bin/go-trainer", Launcher: LauncherExternal},
			Process{Path: "/self", Args: []string{WorkerArg}, Self: true, External: []string{"/bin/go-trainer"},
				Env: []string{Builtin + "=external", ExternalCommand + `=["/bin/go-trainer"]`}}, ""},
		{"direct", Entrypoint{Command: "/bin/sh", Args: []string{"run.sh"}, Launcher: LauncherDirect},
			Process{Path: "/bin/sh", Args: []string{"run.sh"}}, ""},
		{"the wrapper by name", Entrypoint{Builtin: ExternalBuiltin}, Process{}, `builtin "external" is how a command entrypoint runs`},
		{"both", Entrypoint{Builtin: "quickstart", Command: "/bin/sh"}, Process{}, "both a builtin and a command"},
		{"neither", Entrypoint{}, Process{}, ErrNoEntrypoint.Error()},
		{"bad launcher", Entrypoint{Command: "/bin/sh", Launcher: "fork"}, Process{}, `unknown launcher "fork"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := StartFor(tc.ep, "/self", goTrainer)
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
		})
	}
}
