package trainspec

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// The HCL parser reports a missing closing brace at the outermost block
// left open, as an inner block's brace is matched by the file's last "}".
// pointAtUnclosed moves that report to the block whose closing brace does
// not line up with the line that opened it: the one a reader left open.

const unclosedSummary = "Unclosed configuration block"

func pointAtUnclosed(src []byte, filename string, diags hcl.Diagnostics) {
	for _, d := range diags {
		if d.Summary != unclosedSummary || d.Subject == nil {
			continue
		}
		open, ok := misalignedBlock(src, filename)
		if !ok || open.Start.Line == d.Subject.Start.Line {
			continue
		}
		d.Detail = fmt.Sprintf("There is no closing brace for this block: by indentation it is closed by the brace meant for the block at line %d. %s",
			d.Subject.Start.Line, "Add the missing \"}\".")
		d.Subject = open.Ptr()
	}
}

// misalignedBlock is the range of the first "{" that ends its line and
// whose matching "}" is indented differently from that line.
func misalignedBlock(src []byte, filename string) (hcl.Range, bool) {
	tokens, _ := hclsyntax.LexConfig(src, filename, hcl.InitialPos)
	indent := func(line int) int { // column of the line's first token
		for _, t := range tokens {
			if t.Range.Start.Line == line && t.Type != hclsyntax.TokenNewline {
				return t.Range.Start.Column
			}
		}
		return 0
	}
	var stack []int // indices of the open braces
	for i, t := range tokens {
		switch t.Type {
		case hclsyntax.TokenOBrace:
			stack = append(stack, i)
		case hclsyntax.TokenCBrace:
			if len(stack) == 0 {
				continue
			}
			oi := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			o := tokens[oi]
			endsLine := oi+1 < len(tokens) && tokens[oi+1].Type == hclsyntax.TokenNewline
			if endsLine && indent(o.Range.Start.Line) != t.Range.Start.Column {
				return o.Range, true
			}
		}
	}
	return hcl.Range{}, false
}
