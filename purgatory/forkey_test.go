package purgatory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errMoved = errors.New("leadership moved")

// CompleteForKey completes every pending operation on the key once, with
// the cause, runs OnComplete and not OnExpiration, releases each from its
// other keys and its timeout, and counts them apart.
func TestCompleteForKey(t *testing.T) {
	t.Parallel()
	p, mt := newMockPurgatory(t)
	a, b, c := newOp(time.Second), newOp(time.Minute), newOp(time.Second)
	mustPark(t, p, a, "k", "x")
	mustPark(t, p, b, "k")
	mustPark(t, p, c, "x")
	done := newOp(time.Second)
	mustPark(t, p, done, "k")
	done.ForceComplete()

	assert.Equal(t, 2, p.CompleteForKey("k", errMoved))
	for _, op := range []*mockOp{a, b} {
		assert.True(t, op.IsCompleted())
		assert.False(t, op.IsExpired())
		assert.ErrorIs(t, op.Cause(), errMoved)
		assert.Equal(t, int32(1), op.Completes.Load())
		assert.Zero(t, op.Expiries.Load())
	}
	assert.Nil(t, done.Cause(), "completed before: its cause is its own")
	assert.False(t, c.IsCompleted())
	assert.Equal(t, 0, p.CompleteForKey("k", errMoved), "nothing left on the key")

	st := p.Stats()
	assert.Equal(t, uint64(2), st.CompletedForKey)
	assert.Equal(t, uint64(1), st.CompletedEarly)
	assert.Equal(t, 1, st.Pending)
	assert.Equal(t, 1, st.Watched, "a left x too")

	mt.Advance(2 * time.Minute)
	assert.Equal(t, int32(1), a.Completes.Load(), "no second completion at the timeout")
	assert.Equal(t, uint64(1), p.Stats().Expired, "only c expired")
}

// A nil cause completes as well, and Cause reports nil.
func TestCompleteForKeyNilCause(t *testing.T) {
	t.Parallel()
	p, _ := newMockPurgatory(t)
	op := newOp(time.Second)
	mustPark(t, p, op, "k")
	require.Equal(t, 1, p.CompleteForKey("k", nil))
	assert.NoError(t, op.Cause())
	assert.True(t, op.IsCompleted())
	assert.Equal(t, uint64(1), p.Stats().CompletedForKey)
}
