package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// Reading a request: its body (bounded) and its query parameters (checked against
// the route's own).

// drainFactor bounds how much of an oversized body is read and discarded before the
// 413, as a multiple of the limit: beyond it the connection is closed instead.
const drainFactor = 4

// readBody reads at most max bytes of r's body; a longer body is kv.ErrTooLarge.
//
// A client that does not send "Expect: 100-continue" (curl does for large bodies;
// Go's http.Client and Python's urllib do not) is still writing its body when the
// answer is decided. Closing the connection then shows it a connection reset rather
// than the 413, so the body is read and discarded up to drainFactor times max, and
// only a longer one closes the connection. A client that did send the Expect header
// is answered at once: it has sent nothing yet and waits for the verdict.
func readBody(w http.ResponseWriter, r *http.Request, max int64, what string) ([]byte, error) {
	if r.ContentLength > max {
		drainBody(w, r, max)
		return nil, fmt.Errorf("%w: %s is %d bytes, more than the maximum %d", kv.ErrTooLarge, what, r.ContentLength, max)
	}
	b, err := readCapped(w, r, max, what)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: %s is more than the maximum %d bytes", kv.ErrTooLarge, what, max)
	}
	return b, nil
}

// readCapped reads r's body, but at most max+1 bytes: the cap bounds what a body
// costs the door, and the byte past max lets the rule that owns the limit refuse it
// (a longer body is drained, drainBody). It refuses nothing for its size.
func readCapped(w http.ResponseWriter, r *http.Request, max int64, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %v", kv.ErrInvalidBody, what, err)
	}
	if int64(len(b)) > max {
		drainBody(w, r, max)
	}
	return b, nil
}

// decodeJSONBody serves the routes whose request is a JSON body and no query
// parameter: it refuses any parameter, reads the body (at most max bytes) and decodes
// it into v; op prefixes a decoding error ("acl token: ...").
func decodeJSONBody(w http.ResponseWriter, r *http.Request, max int64, what, op string, v any) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	body, err := readBody(w, r, max, what)
	if err != nil {
		return err
	}
	if err := kv.DecodeJSON(body, v); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// drainBody discards the rest of an oversized body so that the client, done writing,
// reads the answer; a body longer than drainFactor·max, or one the client has not sent
// yet (Expect: 100-continue), is not read and the connection closes after the answer.
func drainBody(w http.ResponseWriter, r *http.Request, max int64) {
	bound := drainFactor * max
	if strings.EqualFold(r.Header.Get("Expect"), "100-continue") || r.ContentLength > bound {
		w.Header().Set("Connection", "close")
		return
	}
	n, err := io.Copy(io.Discard, io.LimitReader(r.Body, bound+1))
	if err != nil || n > bound {
		w.Header().Set("Connection", "close")
	}
}

// params is a request's query, checked against the parameters its route accepts. It
// holds each name's one value in place, so reading a query costs no map and no
// allocation (url.ParseQuery's map, slices and strings were a fifth of a GET's).
type params struct {
	kv [maxParams]param
	n  int
}

type param struct{ name, value string }

// maxParams bounds the parameters of one request: more than any route accepts (a name
// may appear once, and only the route's own names are taken).
const maxParams = 12

// parseParams rejects unknown and repeated parameters, so a typo (?prefx=true) is a
// 400 instead of a request that silently does something else. The query is split as
// url.ParseQuery splits it (on "&", "+" and %XX unescaped, ";" refused, empty parts
// skipped).
func parseParams(r *http.Request, allowed ...string) (params, error) {
	var p params
	query := r.URL.RawQuery
	for query != "" {
		var part string
		part, query, _ = strings.Cut(query, "&")
		if strings.Contains(part, ";") {
			return params{}, fmt.Errorf("%w: query: invalid semicolon separator in query", kv.ErrInvalidParam)
		}
		if part == "" {
			continue
		}
		rawName, rawValue, _ := strings.Cut(part, "=")
		name, err := url.QueryUnescape(rawName)
		if err == nil {
			rawValue, err = url.QueryUnescape(rawValue)
		}
		if err != nil {
			return params{}, fmt.Errorf("%w: query: %v", kv.ErrInvalidParam, err)
		}
		if err := p.add(name, rawValue, allowed); err != nil {
			return params{}, err
		}
	}
	return p, nil
}

// add records one parameter, refusing a name the route does not take or a repeat.
func (p *params) add(name, value string, allowed []string) error {
	if !contains(allowed, name) {
		return fmt.Errorf("%w: unknown parameter %q (allowed: %v)", kv.ErrInvalidParam, name, allowed)
	}
	if _, ok := p.lookup(name); ok {
		return fmt.Errorf("%w: parameter %q given more than once", kv.ErrInvalidParam, name)
	}
	if p.n == maxParams {
		return fmt.Errorf("%w: more than %d parameters", kv.ErrInvalidParam, maxParams)
	}
	p.kv[p.n] = param{name, value}
	p.n++
	return nil
}

func (p *params) lookup(name string) (string, bool) {
	for i := range p.n {
		if p.kv[i].name == name {
			return p.kv[i].value, true
		}
	}
	return "", false
}

// get is the parameter's value, "" when absent.
func (p params) get(name string) string {
	v, _ := p.lookup(name)
	return v
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// has reports whether the parameter is present.
func (p params) has(name string) bool {
	_, ok := p.lookup(name)
	return ok
}

// bool parses "true"/"false" (and the other strconv.ParseBool spellings); absent = false.
func (p params) bool(name string) (bool, error) {
	v := p.get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: %s=%q is not a boolean", kv.ErrInvalidParam, name, v)
	}
	return b, nil
}

// int64 parses a decimal integer >= min; absent = def.
func (p params) int64(name string, min, def int64) (int64, error) {
	v := p.get(name)
	if v == "" {
		if p.has(name) {
			return 0, fmt.Errorf("%w: %s is empty", kv.ErrInvalidParam, name)
		}
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s=%q is not an integer", kv.ErrInvalidParam, name, v)
	}
	if n < min {
		return 0, fmt.Errorf("%w: %s=%d must be >= %d", kv.ErrInvalidParam, name, n, min)
	}
	return n, nil
}

// consistency parses ?consistency=; absent = linearizable.
func (p params) consistency() (fsm.Consistency, error) {
	switch v := p.get(api.ParamConsistency); v {
	case "", api.ConsistencyLinearizable:
		return fsm.Linearizable, nil
	case api.ConsistencySerializable:
		return fsm.Serializable, nil
	default:
		return 0, fmt.Errorf("%w: %s=%q must be %q or %q", kv.ErrInvalidParam, api.ParamConsistency, v,
			api.ConsistencyLinearizable, api.ConsistencySerializable)
	}
}
