package partlog_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/purgatory-go/purgatory/examples/produce_fetch/internal/partlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// appendValues appends one batch of values and returns its size.
func appendValues(t *testing.T, l *partlog.Log, values ...string) int64 {
	t.Helper()
	var vs [][]byte
	for _, v := range values {
		vs = append(vs, []byte(v))
	}
	raw := partlog.EncodeBatch(vs, time.Now())
	rb, e, msg := partlog.ParseBatch(raw)
	require.Nil(t, e, msg)
	l.Append(raw, rb.NumRecords)
	return int64(len(raw))
}

// DeleteBefore drops the batches wholly below the new log start, keeps
// one that straddles it whole, and leaves byte counts of what remains as
// they were.
func TestDeleteBefore(t *testing.T) {
	var l partlog.Log
	a := appendValues(t, &l, "a", "b") // offsets 0-1
	c := appendValues(t, &l, "c", "d") // offsets 2-3
	e := appendValues(t, &l, "e")      // offset 4
	require.Equal(t, int64(5), l.End())
	assert.Equal(t, a+c+e, l.BytesBetween(0, 5))

	l.DeleteBefore(3)
	assert.Equal(t, int64(3), l.Start())
	assert.Len(t, l.Batches(), 2, "the batch of offsets 2-3 straddles the start and is kept")
	assert.Equal(t, c+e, l.BytesBetween(3, 5))
	got := l.Read(3, 5, 1<<20, true)
	require.Len(t, got, 2)
	values, next, err := partlog.DecodeValues(got, 3)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{[]byte("d"), []byte("e")}, values)
	assert.Equal(t, int64(5), next)

	l.DeleteBefore(2)
	assert.Equal(t, int64(3), l.Start(), "the log start only rises")
	l.DeleteBefore(5)
	assert.Equal(t, int64(5), l.Start())
	assert.Empty(t, l.Batches())
	assert.Equal(t, int64(0), l.BytesBetween(5, 5))
	off, _ := l.OffsetForTimestamp(0)
	assert.Equal(t, int64(-1), off, "no batch left")
}
