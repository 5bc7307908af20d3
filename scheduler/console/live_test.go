package console

import (
	"bytes"
	"testing"

	"github.com/shoenig/test/must"
)

// Output scrolls above the region; the region is cleared before output
// and drawn again after its whole lines, cut to the terminal.
func TestLive(t *testing.T) {
	var b bytes.Buffer
	l := NewLive(&b, func() (int, int) { return 12, 5 })
	step := func(what string, do func(), want string) {
		t.Helper()
		b.Reset()
		do()
		must.Eq(t, want, b.String(), must.Sprint(what))
	}
	step("output with no region", func() { l.Write([]byte("a\n")) }, "a\n")
	step("a partial line waits", func() { l.Write([]byte("par")) }, "")
	step("a bar", func() { l.Set("epoch 1/20 [====>    ]") }, "epoch 1/20 ")
	step("output clears it and draws it again", func() { l.Write([]byte("tial\nb\n")) },
		"\r\x1b[Jpartial\nb\nepoch 1/20 ")
	step("a table, tall: cut to the rows", func() { l.Frame("h\n1\n2\n3\n4\n5\n") },
		"\r\x1b[Jh\n1\n2\n... 3 more ") // 11 columns: a full line would wrap
	step("a table replaced: up three lines first", func() { l.Frame("h\n1\n") },
		"\r\x1b[3A\x1b[Jh\n1")
	step("finish keeps it", func() { l.Finish(true) }, "\n")
	step("after finish output scrolls", func() { l.Write([]byte("c\n")) }, "c\n")
	step("finish without keep removes it", func() { l.Set("bar"); l.Finish(false) }, "bar\r\x1b[J")
}
