package lincheck

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// A departure gives its place back after the swap that completes the
// operation, within its own interval: a park refused with ErrFull after a
// ForceComplete has seen the operation completed, while its expiry is
// still under way, is legal. Once the expiry's interval has ended, the
// place is free, and the same refusal is not.
func TestCountModelGivesBackWithinTheDeparture(t *testing.T) {
	ev := func(kind pkind, op int, out pout, call, ret int64, client int) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: pin{kind: kind, op: op}, Output: out, Call: call, Return: ret}
	}
	history := func(expiryEnds int64) []porcupine.Operation {
		return withGiveBacks([]porcupine.Operation{
			ev(evPark, 0, pout{}, 1, 2, 0),
			ev(evExpired, 0, pout{}, 3, expiryEnds, 1),
			ev(evFC, 0, pout{ok: false}, 4, 5, 0),
			ev(evPark, 1, pout{err: errFull}, 6, 7, 0),
		})
	}
	m := countModel(2, 1)
	if !porcupine.CheckOperations(m, history(10)) {
		t.Error("a refusal while the expiry is still giving back its place: illegal, want legal")
	}
	if porcupine.CheckOperations(m, history(5)) {
		t.Error("a refusal after the expiry has returned: legal, want illegal")
	}
}
