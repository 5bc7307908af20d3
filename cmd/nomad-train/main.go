// Command nomad-train runs, compiles and checks train.hcl specs. It only wires
// the packages together; each subcommand lives in its own file and registers
// itself in the commands table.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/nomad-train/nomad-train/builtins"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// command is one subcommand: it gets its arguments (after the subcommand
// name) and returns the process exit code.
type command struct {
	synopsis string
	run      func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands is filled by register calls in each subcommand's file.
var commands = map[string]command{}

func register(name, synopsis string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	commands[name] = command{synopsis: synopsis, run: run}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == workerenv.WorkerArg {
		os.Exit(builtins.WorkerMain()) // before any signal handling of ours
	}
	// A reader of our output that goes away (| head, a closed terminal)
	// stops a run as Ctrl-C does: by default SIGPIPE would kill the
	// launcher before it stopped its workers in order. Writes to the
	// closed pipe then fail, and are dropped.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
	defer stop()
	os.Exit(dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	name := args[0]
	if name == "-version" || name == "--version" {
		name = "version"
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "nomad-train: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: nomad-train <command> [flags] [args]")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].synopsis)
	}
	fmt.Fprintln(w, "\nnomad-train <command> -h shows a command's flags.")
}
