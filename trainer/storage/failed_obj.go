package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// failureTimeout bounds a failure mark's call to an object store: the
// callers (a failing worker, a launcher) have no context of their own to
// give, and must not hang on a store that does not answer.
const failureTimeout = 30 * time.Second

// failureStore opens the object store of root for a failure mark, with
// cfg's options on top of the AWS environment's.
func failureStore(root, run string, cfg objstore.Config) (*objstore.Store, context.Context, context.CancelFunc, error) {
	if err := checkRunName(run); err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), failureTimeout)
	st, err := objstore.Open(ctx, root, cfg)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return st, ctx, cancel, nil
}

// markFailedObject writes <run>/FAILED.json, one whole-object write.
func markFailedObject(root, run string, f Failure, cfg objstore.Config) error {
	st, ctx, cancel, err := failureStore(root, run, cfg)
	if err != nil {
		return fmt.Errorf("mark run failed: %w", err)
	}
	defer cancel()
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("mark run failed: %w", err)
	}
	if _, err := st.Put(ctx, run+"/"+FailedFile, bytes.NewReader(b)); err != nil {
		return fmt.Errorf("mark run failed: %w", err)
	}
	return nil
}

func failedObject(root, run, attempt string, cfg objstore.Config) (Failure, bool, error) {
	st, ctx, cancel, err := failureStore(root, run, cfg)
	if err != nil {
		return Failure{}, false, fmt.Errorf("read failure mark: %w", err)
	}
	defer cancel()
	return failedOn(ctx, st, run, attempt)
}

// failedOn reads the failure mark of run on an open store (a reader that
// keeps its store open looks at it without opening one each time).
func failedOn(ctx context.Context, st *objstore.Store, run, attempt string) (Failure, bool, error) {
	b, err := objFiles{ctx: ctx, st: st}.getSmall(run + "/" + FailedFile)
	if errors.Is(err, objstore.ErrNotFound) {
		return Failure{}, false, nil
	}
	if err != nil {
		return Failure{}, false, fmt.Errorf("read failure mark: %w", err)
	}
	f, err := DecodeFailure(b)
	if err != nil {
		return Failure{}, false, fmt.Errorf("read failure mark: %w", err)
	}
	return f, f.Concerns(attempt), nil
}

func clearFailedObject(root, run string, cfg objstore.Config) error {
	st, ctx, cancel, err := failureStore(root, run, cfg)
	if err != nil {
		return fmt.Errorf("clear failure mark: %w", err)
	}
	defer cancel()
	if err := st.Delete(ctx, run+"/"+FailedFile); err != nil {
		return fmt.Errorf("clear failure mark: %w", err)
	}
	return nil
}
