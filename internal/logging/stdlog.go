package logging

import (
	"io"
	"log"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// StandardLogger is a standard library logger whose lines go through f, so that the
// routine table applies to libraries that log through one (memberlist). With
// opts.InferLevels a "[ERR]"-style prefix gives the level and is cut, as hclog's own
// adapter does; opts.ForceLevel overrides it; otherwise INFO.
func (f *filter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(f.StandardWriter(opts), "", 0)
}

// StandardWriter is StandardLogger's writer: one line per Write.
func (f *filter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	w := stdWriter{f: f}
	if opts != nil {
		w.opts = *opts
	}
	return w
}

type stdWriter struct {
	f    *filter
	opts hclog.StandardLoggerOptions
}

func (w stdWriter) Write(p []byte) (int, error) {
	msg := strings.TrimRight(string(p), " \n\t")
	level := hclog.Info
	if w.opts.InferLevels || w.opts.ForceLevel != hclog.NoLevel {
		if l, rest, ok := cutLevel(msg); ok {
			level, msg = l, rest
		}
	}
	if w.opts.ForceLevel != hclog.NoLevel {
		level = w.opts.ForceLevel
	}
	w.f.Log(level, msg)
	return len(p), nil
}

// cutLevel reads the level prefix of a standard-library log line.
func cutLevel(s string) (hclog.Level, string, bool) {
	for _, p := range []struct {
		prefix string
		level  hclog.Level
	}{{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info}, {"[WARN]", hclog.Warn},
		{"[ERROR]", hclog.Error}, {"[ERR]", hclog.Error}} {
		if rest, ok := strings.CutPrefix(s, p.prefix); ok {
			return p.level, strings.TrimSpace(rest), true
		}
	}
	return hclog.NoLevel, s, false
}
