package storage

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// FailedFile marks a run that failed for good: its training function
// failed, or its failure budget is spent. Restarting a worker cannot help
// it, so the Nomad driver refuses to start its workers (Nomad then stops
// restarting them) and workers waiting to re-form the gang give up. A
// deliberate new run (`nomad-train run`) removes it; so may the user.
const FailedFile = "FAILED.json"

// FailedLocation names, for people, the mark of the run called run under
// the storage path root: a path, or a URL on an object store.
func FailedLocation(root, run string) string {
	if IsObjectPath(root) {
		return RunLocation(root, run) + "/" + FailedFile
	}
	return filepath.Join(root, run, FailedFile)
}

// Failure is the content of FailedFile.
type Failure struct {
	Reason   string    `json:"reason"`
	ExitCode int       `json:"exit_code"`
	Time     time.Time `json:"time"`
	// Attempt is the AttemptID of the attempt at the run that failed.
	Attempt string `json:"attempt,omitempty"`
}

// AttemptID names one attempt at a run by its secret, which is fresh for
// each submission (`nomad-train run`, a tuner's trial, a local launch): a
// record stamped with another attempt's ID was left by an earlier attempt
// at a run of the same name, which did not clear it. Without a secret it
// is "", which matches every attempt.
func AttemptID(secret []byte) string {
	if len(secret) == 0 {
		return ""
	}
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("nomad-train/attempt/v1"))
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Concerns reports whether the failure was the attempt's own: one of an
// earlier attempt does not stop this one. Records without an attempt (and
// attempts without one) concern every attempt.
func (f Failure) Concerns(attempt string) bool {
	return f.Attempt == "" || attempt == "" || f.Attempt == attempt
}

// MarkFailed records that the run under root/run failed for good. It
// writes atomically (temporary file, rename), so readers see all or nothing.
// Of opts only WithObjectConfig counts, for an s3:// root.
func MarkFailed(root, run string, f Failure, opts ...Option) error {
	if IsObjectPath(root) {
		return markFailedObject(root, run, f, objectConfig(opts))
	}
	dir, err := runDir(root, run)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("mark run failed: %w", err)
	}
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("mark run failed: %w", err)
	}
	if err := writeFileAtomic(dir, FailedFile, b); err != nil {
		return fmt.Errorf("mark run failed: %w", err)
	}
	return nil
}

// FailedForGood returns the run's failure record when it failed for good
// in the given attempt (see Failure.Concerns). Of opts only
// WithObjectConfig counts, for an s3:// root.
func FailedForGood(root, run, attempt string, opts ...Option) (Failure, bool, error) {
	if IsObjectPath(root) {
		return failedObject(root, run, attempt, objectConfig(opts))
	}
	dir, err := runDir(root, run)
	if err != nil {
		return Failure{}, false, err
	}
	path := filepath.Join(dir, FailedFile)
	file, err := openRegular(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Failure{}, false, nil
	}
	if err != nil {
		return Failure{}, false, fmt.Errorf("read failure mark: %w", err)
	}
	defer file.Close()
	if err := checkMarkOwner(file, opts); err != nil {
		return Failure{}, false, err
	}
	b, err := io.ReadAll(io.LimitReader(file, maxFailureSize+1))
	if err != nil {
		return Failure{}, false, fmt.Errorf("read failure mark: %w", err)
	}
	f, err := DecodeFailure(b)
	if err != nil {
		return Failure{}, false, fmt.Errorf("read failure mark %s: %w", path, err)
	}
	return f, f.Concerns(attempt), nil
}

// WithMarkOwner makes FailedForGood, on a directory, count a failure mark
// only when the user uid owns it. The driver reads a task's mark as root,
// at a path the job chose; the run's own marks are its workers', written
// as the task's user (a mark that is not, say on a share that maps users,
// is left to the workers, which find it themselves).
func WithMarkOwner(uid int) Option { return func(o *options) { o.owner = &uid } }

// checkMarkOwner refuses a failure mark that the owner opts name does not
// own.
func checkMarkOwner(f *os.File, opts []Option) error {
	owner := optionsOf(opts).owner
	if owner == nil {
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("read failure mark: %w", err)
	}
	if uid, ok := fileOwner(fi); !ok || uid != *owner {
		return fmt.Errorf("failure mark %s is not the task user's (uid %d), so not this run's", f.Name(), *owner)
	}
	return nil
}

// maxFailureSize bounds a failure record read from storage.
const maxFailureSize = 1 << 20

// DecodeFailure parses the content of FailedFile: one JSON object of at
// most maxFailureSize bytes.
func DecodeFailure(b []byte) (Failure, error) {
	if len(b) > maxFailureSize {
		return Failure{}, fmt.Errorf("failure record is longer than %d bytes", maxFailureSize)
	}
	var f Failure
	if err := json.Unmarshal(b, &f); err != nil {
		return Failure{}, fmt.Errorf("decoding failure record: %w", err)
	}
	return f, nil
}

// ClearFailed removes the mark, for a deliberate new attempt at the run.
// Of opts only WithObjectConfig counts, for an s3:// root.
func ClearFailed(root, run string, opts ...Option) error {
	if IsObjectPath(root) {
		return clearFailedObject(root, run, objectConfig(opts))
	}
	dir, err := runDir(root, run)
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, FailedFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("clear failure mark: %w", err)
	}
	return nil
}

// runDir is root/run for a local root, checked as Open checks it.
func runDir(root, run string) (string, error) {
	dir, err := localRoot(root)
	if err != nil {
		return "", err
	}
	if err := checkRunName(run); err != nil {
		return "", err
	}
	return filepath.Join(dir, run), nil
}
