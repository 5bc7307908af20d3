package data

import (
	"errors"
	"testing"

	"github.com/shoenig/test/must"
)

func TestCheckGlobalBatch(t *testing.T) {
	for _, tc := range []struct {
		batch, min, max int
		err             string
	}{
		{64, 4, 4, ""},
		{64, 3, 3, "batch_size 64 does not split evenly over 3 workers"},
		{0, 2, 2, "batch_size must be at least 1; got 0"},
		{2, 4, 4, "batch_size 2 does not split evenly over 4 workers"},
		{12, 2, 4, ""},
		{64, 2, 4, "batch_size 64 does not split evenly over 3 workers, a size the elastic gang of 2 to 4 may train at: make it a multiple of 12"},
		{60, 1, 6, ""},
	} {
		err := CheckGlobalBatch("batch_size", tc.batch, tc.min, tc.max)
		if tc.err == "" {
			must.NoError(t, err)
			continue
		}
		must.EqError(t, err, tc.err)
		var se *SettingError
		must.True(t, errors.As(err, &se))
		must.EqOp(t, "batch_size", se.ConfigKey())
	}
}
