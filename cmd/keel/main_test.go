package main

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorLineHasOnePrefix(t *testing.T) {
	for i, tc := range []struct {
		err  error
		want string
	}{
		{errors.New("keel: 404 NotFound: get \"nope\""), "keel: 404 NotFound: get \"nope\""},
		{errors.New("agent: -data-dir is required"), "keel: agent: -data-dir is required"},
		{fmt.Errorf("wrapped: %w", errors.New("keel: 409")), "keel: wrapped: keel: 409"},
	} {
		if got := errorLine(tc.err); got != tc.want {
			t.Errorf("#%d: errorLine = %q, want %q", i, got, tc.want)
		}
	}
}
