//go:build !unix

package console

import "os"

// Terminal returns nil here: the output stays plain lines.
func Terminal(*os.File) *Live { return nil }
