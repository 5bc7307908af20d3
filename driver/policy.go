package driver

// What a job may ask of the node: which variables its environment may set,
// which reach which process, and which users it may run as. README.md's
// "Security model" is the prose of these rules.

import (
	"errors"
	"fmt"
	"maps"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// ErrReservedEnv is wrapped when a task's environment sets variables that
// only the driver sets.
var ErrReservedEnv = errors.New("the task's env sets variables the train driver owns")

// ErrBadEnvName is wrapped when a task's environment has a key that is no
// variable name: one with "=" would set another variable than its name
// says, past the checks made by name.
var ErrBadEnvName = errors.New("the task's env has keys that are no variable names")

// ErrDeniedUser is wrapped when a task asks for a user the plugin config's
// denied_users lists.
var ErrDeniedUser = errors.New("user is in the plugin's denied_users")

// isReservedEnv reports whether only the driver may set k
// (workerenv.Reserved). A job that set them could run another program than
// the one allowed_command_dirs let through, read another secret, or claim
// another rank.
func isReservedEnv(k string) bool { return workerenv.Reserved(k) }

// checkTaskEnv refuses a task environment with a key that is no variable
// name (workerenv.ValidName), or that sets reserved variables, naming
// them all. own looks up the driver's own environment (os.LookupEnv),
// which is the client agent's: Nomad hands the agent's environment to the
// tasks of a driver without filesystem isolation, so a reserved variable
// with the very value the driver has came from where the agent was
// started, not from the job, and the message says so.
func checkTaskEnv(env map[string]string, own func(string) (string, bool)) error {
	var bad []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !workerenv.ValidName(k) {
			bad = append(bad, strconv.Quote(k))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s; a name may not be empty or hold \"=\" or NUL", ErrBadEnvName, strings.Join(bad, ", "))
	}
	var fromJob, fromAgent []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !isReservedEnv(k) {
			continue
		}
		if v, ok := own(k); ok && v == env[k] {
			fromAgent = append(fromAgent, k)
		} else {
			fromJob = append(fromJob, k)
		}
	}
	var parts []string
	if len(fromJob) > 0 {
		parts = append(parts, fmt.Sprintf("%s; remove them from the job (env block, templates with env = true): the driver sets them for every worker",
			strings.Join(fromJob, ", ")))
	}
	if len(fromAgent) > 0 {
		parts = append(parts, fmt.Sprintf("%s set in the Nomad client agent's own environment, which Nomad hands to this driver's tasks; unset them where the agent is started (its service unit or shell) and restart it",
			strings.Join(fromAgent, ", ")))
	}
	if len(parts) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrReservedEnv, strings.Join(parts, "; and "))
}

// ErrBadSetting is wrapped when a task's environment gives one of the
// runtime's tuning knobs a value its workers would refuse.
var ErrBadSetting = errors.New("the task's env sets a runtime setting its workers refuse")

// checkTaskSettings refuses a task environment whose tuning knobs
// (workerenv.TaskSettable) have values the worker would refuse at start
// (workerenv.CheckSetting), naming each. train.hcl's validate catches
// these at file:line; a job written by hand, or a bad value from a
// template, is refused here, once, where the worker would exit 2 at every
// restart.
func checkTaskSettings(env map[string]string) error {
	var bad []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if err := workerenv.CheckSetting(k, env[k]); err != nil {
			bad = append(bad, truncate(err.Error(), 200)) // it quotes the job's value, of any length
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrBadSetting, strings.Join(bad, "; "))
}

// selfWithheld are variables the dynamic loader, glibc or the Go runtime
// act on as a process starts (besides every LD_* variable): loading code,
// writing debug files, downgrading security settings. They are what glibc
// ignores for a set-uid program. A process that is the driver binary
// itself (a builtin worker, the wrapper of a command entrypoint) never
// gets them from a job. GOMAXPROCS, GOGC and GOMEMLIMIT only tune, and
// pass.
var selfWithheld = []string{
	"GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN",
	"LOCPATH", "MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF",
	"RES_OPTIONS", "TZDIR", "GODEBUG", "GOTRACEBACK",
}

// withheldFromSelf reports whether k must not reach the driver binary.
func withheldFromSelf(k string) bool {
	return strings.HasPrefix(k, "LD_") || slices.Contains(selfWithheld, k)
}

// userLookup resolves a user name, or a numeric uid, to a user
// (executor.LookupUser in production).
type userLookup func(name string) (*user.User, error)

// uidOf is the uid of a user name or number, if it resolves. Numbers are
// read as the user database reads them ("00" and "+0" are uid 0).
func uidOf(name string, lookup userLookup) (string, bool) {
	if u, err := lookup(name); err == nil {
		return u.Uid, true
	}
	if n, err := strconv.ParseUint(strings.TrimPrefix(name, "+"), 10, 32); err == nil {
		return strconv.FormatUint(n, 10), true
	}
	return "", false
}

// checkUser refuses a user that denied names, by name or by uid: user = "0"
// or another name for uid 0 is root. A user that does not resolve is left
// to the executor, which says it is unknown.
func checkUser(name string, denied []string, lookup userLookup) error {
	if name == "" {
		return nil
	}
	uid, resolved := uidOf(name, lookup)
	for _, d := range denied {
		if d == name {
			return fmt.Errorf("user %q: %w", name, ErrDeniedUser)
		}
		if duid, ok := uidOf(d, lookup); ok && resolved && duid == uid {
			return fmt.Errorf("user %q (uid %s, as %q): %w", name, uid, d, ErrDeniedUser)
		}
	}
	return nil
}

// checkDefaultUser refuses a plugin config whose default_user its own
// denied_users denies: every task naming no user would be refused.
func checkDefaultUser(c PluginConfig, lookup userLookup) error {
	if err := checkUser(c.DefaultUser, c.DeniedUsers, lookup); err != nil {
		return fieldErr("default_user", "default_user %q is in denied_users %q (%v): pick another default_user or change denied_users",
			c.DefaultUser, c.DeniedUsers, err)
	}
	return nil
}

// warnPolicy logs what a plugin config leaves open that an operator may
// not expect. euid is the plugin's effective uid.
func warnPolicy(logger hclog.Logger, c PluginConfig, euid int) {
	if c.ConsulToken != "" && c.TaskConsulToken == "" {
		logger.Warn("consul_token is no longer given to tasks; set task_consul_token to give workers a Consul token")
	}
	if c.DefaultUser == "" && euid == 0 {
		logger.Warn("tasks that name no user run as root; set default_user to run them as an unprivileged user")
	}
}
