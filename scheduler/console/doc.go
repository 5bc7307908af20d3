// Package console is what the nomad-train CLI prints: the status of a run
// on Nomad or on this machine, a run's reports as it trains, its result and
// final summary, an experiment's summary, and, on a terminal, a live
// progress bar or trial table redrawn in place.
//
// What is printed is built by pure renderers (a state and a width in, a
// string out: Bar, Summary) tested with golden strings; Live is the thin
// writer that puts a live region under the scrolling output on a
// terminal. cmd/nomad-train parses flags and calls into this package; no
// other package imports it.
package console
