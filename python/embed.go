// Package python carries nomad_train.py, the helper a Python worker imports
// to report metrics and checkpoints to nomad-train (see the file's
// docstring for the protocol). The external worker wrapper puts it on the
// command's PYTHONPATH.
//
//	os.WriteFile(filepath.Join(dir, python.HelperName), python.Helper(), 0o644)
package python

import _ "embed"

// HelperName is the helper's file name.
const HelperName = "nomad_train.py"

//go:embed nomad_train.py
var helper []byte

// Helper returns the helper's source (a fresh copy).
func Helper() []byte { return append([]byte(nil), helper...) }
