package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"

	"github.com/shoenig/test/must"
)

// Every command's -h names each flag's argument by a word: a backquoted
// phrase in a flag's usage would be taken for its argument's name.
func TestHelpFlagArguments(t *testing.T) {
	line := regexp.MustCompile(`(?m)^  -(\S+) (.+)$`)
	for name := range commands {
		var out, errb bytes.Buffer
		must.EqOp(t, 0, dispatch(context.Background(), []string{name, "-h"}, &out, &errb), must.Sprint(name))
		for _, m := range line.FindAllStringSubmatch(errb.String(), -1) {
			must.StrNotContains(t, m[2], " ", must.Sprintf("%s -%s: argument named %q", name, m[1], m[2]))
		}
	}
}
