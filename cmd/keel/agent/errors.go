package agent

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/keel-kv/keel/kv"
)

// The agent's routes answer every failure through kv's one error table
// (a.server.WriteError): they return errors that are kv's sentinels, or raft's and
// versions' that the table knows, and never pick a status or reason themselves.

// kindError is err answered as kind: errors.Is finds both, the message is err's.
type kindError struct{ kind, err error }

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// asKind is err classified by kv's table as kind (a kv sentinel), its message kept:
// how the agent translates another package's error at its edge.
func asKind(kind, err error) error { return &kindError{kind: kind, err: err} }

// bodyError is a failure to read or decode a request body: kv.ErrTooLarge past the
// route's bound, else kv.ErrInvalidBody.
func bodyError(err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("%w: body over %d bytes", kv.ErrTooLarge, tooLarge.Limit)
	}
	return fmt.Errorf("%w: %v", kv.ErrInvalidBody, err)
}
