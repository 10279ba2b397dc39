package logging

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/go-hclog"
)

// ErrFormat: a -log-format that is neither text nor json.
var ErrFormat = errors.New("logging: unknown log format")

// Formats of New.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// Options configure New.
type Options struct {
	Name   string // the root module, "keel"
	Level  hclog.Level
	Format string // FormatText (default when empty) or FormatJSON
	Output io.Writer
	// RepeatWindow is how long a rate-limited routine event stays quiet after it was
	// logged (Filter); zero: DefaultRepeatWindow.
	RepeatWindow time.Duration
}

// DefaultRepeatWindow: a routine event repeated (raft's "failed to heartbeat to" a
// down peer, ten times a second) is logged at most once per peer per window, with the
// count of the ones left out.
const DefaultRepeatWindow = 30 * time.Second

// CheckFormat names the bad value of a -log-format.
func CheckFormat(f string) error {
	switch f {
	case "", FormatText, FormatJSON:
		return nil
	}
	return fmt.Errorf("%w %q: want %s or %s", ErrFormat, f, FormatText, FormatJSON)
}

// New returns the root logger of a process, filtered (Filter).
func New(o Options) (hclog.Logger, error) {
	if err := CheckFormat(o.Format); err != nil {
		return nil, err
	}
	l := hclog.New(&hclog.LoggerOptions{Name: o.Name, Level: o.Level, Output: o.Output,
		JSONFormat: o.Format == FormatJSON})
	return filterWindow(l, o.RepeatWindow), nil
}
