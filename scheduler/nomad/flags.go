package nomad

import (
	"errors"
	"flag"
	"os"
	"strings"
)

// Flags are the Nomad CLI's connection flags, with its environment
// variables as defaults: how every nomad-train command reaches Nomad.
type Flags struct {
	Address, Token, Namespace, Region string
}

// Register adds -address, -token, -namespace and -region to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Address, "address", os.Getenv("NOMAD_ADDR"), "Nomad address (env NOMAD_ADDR)")
	// No env default here: flag help prints defaults, and a token must not
	// show up there; nomad/api reads NOMAD_TOKEN itself.
	fs.StringVar(&f.Token, "token", "", "Nomad ACL token (default env NOMAD_TOKEN)")
	fs.StringVar(&f.Namespace, "namespace", os.Getenv("NOMAD_NAMESPACE"), "Nomad namespace (env NOMAD_NAMESPACE)")
	fs.StringVar(&f.Region, "region", os.Getenv("NOMAD_REGION"), "Nomad region (env NOMAD_REGION)")
}

// Client connects as the flags say. An address without a scheme is an
// agent's host:port, as in its own config.
func (f *Flags) Client() (*Client, error) {
	addr := f.Address
	if addr != "" && !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return NewClient(Config{Address: addr, Token: f.Token, Namespace: f.Namespace, Region: f.Region})
}

// LocalFlags add -local to Flags, for the commands that run on Nomad when
// an address is given (NOMAD_ADDR too) and on this machine otherwise.
type LocalFlags struct {
	Flags
	Local bool
}

// RegisterLocal adds the connection flags and -local to fs.
func (f *LocalFlags) RegisterLocal(fs *flag.FlagSet) {
	f.Register(fs)
	fs.BoolVar(&f.Local, "local", false, "run on this machine (the embedded default) even when NOMAD_ADDR is set")
}

// ResolveLocal applies -local after fs is parsed: no address, so the
// command runs on this machine. -local with an explicit -address is an
// error.
func (f *LocalFlags) ResolveLocal(fs *flag.FlagSet) error {
	if !f.Local {
		return nil
	}
	explicit := false
	fs.Visit(func(fl *flag.Flag) { explicit = explicit || fl.Name == "address" })
	if explicit {
		return errors.New("-local and -address contradict each other")
	}
	f.Address = ""
	return nil
}
