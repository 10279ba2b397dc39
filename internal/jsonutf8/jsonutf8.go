// Package jsonutf8 finds the strings of a JSON document that encoding/json would
// silently change: invalid UTF-8 bytes and lone UTF-16 surrogate escapes ("\ud800"),
// both of which json.Unmarshal replaces with U+FFFD. A key given in a URL with the same
// bytes is refused; so that a key (or an object field) means the same thing whichever
// way it arrives, callers refuse such a document too, naming the field.
package jsonutf8

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrInvalid is returned (wrapped, with the field's path) for a string that is not
// valid UTF-8 or holds a lone surrogate escape.
var ErrInvalid = errors.New("not valid UTF-8")

// Check returns nil when every string of the JSON document doc, member names included,
// is valid UTF-8 without lone surrogate escapes, and otherwise an error wrapping
// ErrInvalid that names the first bad one by its path ("success[0].key"). It reports
// nothing about syntax: a document that does not parse is left to the decoder.
// A document of valid UTF-8 without any "\u" escape is accepted at once.
func Check(doc []byte) error {
	if utf8.Valid(doc) && !bytes.Contains(doc, []byte(`\u`)) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	type frame struct {
		object  bool
		key     string
		index   int
		wantKey bool
	}
	var stack []frame
	path := func(stack []frame) string {
		var b strings.Builder
		for _, f := range stack {
			if f.object {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			} else {
				b.WriteString("[" + strconv.Itoa(f.index) + "]")
			}
		}
		if b.Len() == 0 {
			return "the body"
		}
		return b.String()
	}
	// value is called after each complete value: it advances the enclosing frame.
	value := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				stack[n-1].wantKey = true
			} else {
				stack[n-1].index++
			}
		}
	}
	for {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil // the end, or a syntax error the decoder will report
		}
		raw := doc[before:dec.InputOffset()]
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, frame{object: true, wantKey: true})
			case '[':
				stack = append(stack, frame{})
			default:
				stack = stack[:len(stack)-1]
				value()
			}
		case string:
			top := len(stack) - 1
			isKey := top >= 0 && stack[top].object && stack[top].wantKey
			if bad(raw) {
				if isKey {
					return fmt.Errorf("a member name in %s is %w", path(stack[:top]), ErrInvalid)
				}
				return fmt.Errorf("%s is %w", path(stack), ErrInvalid)
			}
			if isKey {
				stack[top].key, stack[top].wantKey = t, false
				continue
			}
			value()
		default:
			value()
		}
	}
}

// bad reports whether the raw JSON text of one string token (with any delimiters
// around it) holds invalid UTF-8 or an escaped surrogate that is not part of a pair.
func bad(raw []byte) bool {
	if !utf8.Valid(raw) {
		return true
	}
	pendingHigh := false
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			if pendingHigh {
				return true
			}
			continue
		}
		if raw[i+1] != 'u' || i+6 > len(raw) {
			if pendingHigh {
				return true
			}
			i++ // skip the escaped character
			continue
		}
		v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 32)
		if err != nil {
			return false // a syntax error: the decoder reports it
		}
		switch {
		case v >= 0xD800 && v < 0xDC00:
			if pendingHigh {
				return true
			}
			pendingHigh = true
		case v >= 0xDC00 && v < 0xE000:
			if !pendingHigh {
				return true
			}
			pendingHigh = false
		default:
			if pendingHigh {
				return true
			}
		}
		i += 5
	}
	return pendingHigh
}
