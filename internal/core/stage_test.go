package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refProbe is a task that is a Ref, as an operation's Handle is: the only
// kind staging holds back. Its entry is its taskBase's.
// refProbe is a task added through a Ref, as an operation's Handle is.
type refProbe struct {
	Ref
	base taskBase
	ran
}

func (p *refProbe) entry() *Entry            { return p.base.entry() }
func (p *refProbe) Cancel() bool             { return p.base.Cancel() }
func (p *refProbe) SetDelay(d time.Duration) { p.base.SetDelay(d) }

func newRefProbe(d time.Duration, clk Clock) *refProbe {
	p := &refProbe{}
	p.clk = clk
	p.base.SetDelay(d)
	p.Set(p.base.entry())
	return p
}

// addRefProbes adds n refProbes of delay d to st.
func addRefProbes(t *testing.T, st *Timer, clk Clock, n int, d time.Duration) []*refProbe {
	t.Helper()
	ps := make([]*refProbe, n)
	for i := range ps {
		ps[i] = newRefProbe(d, clk)
		require.NoError(t, st.Add(ps[i]))
	}
	return ps
}

// A task that embeds taskBase is never staged: it is filed at once,
// whatever its deadline.
func TestOnlyRefsAreStaged(t *testing.T) {
	t.Parallel()
	st, clk := newInlineTimer(t, withWheelSize(20))
	p := addProbes(t, st, clk, 1, time.Hour)[0]
	assert.NotNil(t, bucketOf(p))
	r := addRefProbes(t, st, clk, 1, time.Hour)[0]
	assert.Nil(t, bucketOf(r))
	assert.True(t, r.entry().In(&st.staged.mark))
	assert.Equal(t, 2, st.Size())
}

// A task whose deadline is stageMin or more away is staged: counted in
// Size, in no bucket, and filed into the wheels by the drain stageHold
// after the Add that armed it. It runs exactly at the deadline its Add
// fixed; a Cancel while staged leaves nothing counted, and a re-Add while
// staged runs it once, at the new deadline.
func TestStagedTasksRunOnTime(t *testing.T) {
	t.Parallel()
	st, clk := newInlineTimer(t, withWheelSize(20))
	const delay = time.Second
	tasks := addRefProbes(t, st, clk, 3, delay)
	for _, p := range tasks {
		assert.Nil(t, bucketOf(p), "staged, in no bucket")
		assert.True(t, p.entry().In(&st.staged.mark))
	}
	assert.Equal(t, 3, st.Size())
	assert.True(t, tasks[1].Cancel())
	assert.Equal(t, 2, st.Size(), "a staged task's Cancel uncounts it")
	clk.Advance(100 * time.Millisecond)
	tasks[2].SetDelay(delay) // moved: due at 1.1 s
	require.NoError(t, st.Add(tasks[2]))
	assert.Equal(t, 2, st.Size(), "a re-added staged task is counted once")

	clk.Advance(stageHold - 100*time.Millisecond)
	st.runDue()
	assert.NotNil(t, bucketOf(tasks[0]), "the drain filed it")
	assert.NotNil(t, bucketOf(tasks[2]))
	assert.Equal(t, 2, st.Size())

	clk.Advance(delay - stageHold - time.Nanosecond)
	st.runDue()
	assert.Zero(t, tasks[0].runs.Load(), "never early")
	clk.Advance(time.Nanosecond)
	st.runDue()
	assert.Equal(t, int32(1), tasks[0].runs.Load())
	assert.Equal(t, delay, tasks[0].at)
	clk.Advance(100*time.Millisecond - time.Nanosecond)
	st.runDue()
	assert.Zero(t, tasks[2].runs.Load())
	clk.Advance(time.Nanosecond)
	st.runDue()
	assert.Equal(t, int32(1), tasks[2].runs.Load())
	assert.Equal(t, 1100*time.Millisecond, tasks[2].at)
	assert.Zero(t, tasks[1].runs.Load())
	assert.Zero(t, st.Size())
	for i := range st.staged.stripes {
		assert.Empty(t, st.staged.stripes[i].refs)
	}
}

// A clock that jumps past a staged task's deadline runs it in the same
// turn as the drain, at the deadline's time or later, never before.
func TestStagedTaskRunsInTheJumpPastItsDeadline(t *testing.T) {
	t.Parallel()
	mt := NewMock()
	defer mt.Close()
	p := newRefProbe(time.Hour, mt.clock)
	require.NoError(t, mt.Add(p))
	assert.Equal(t, 1, mt.Size())
	assert.Equal(t, 1, mt.Advance(2*time.Hour), "one Advance drains and runs it")
	assert.Equal(t, 2*time.Hour, p.at)
}

// The drain files a staged entry holding its add-lock, as a refile does.
// A Cancel between taking the lock and linking wins and the entry is not
// linked; a Cancel after the link wins too, and the entry leaves the
// bucket when the drain lets go of the lock. Either way the task never
// runs and nothing stays counted.
func TestCancelBetweenTheDrainSteps(t *testing.T) {
	t.Parallel()
	for _, linkedFirst := range []bool{false, true} {
		t.Run(map[bool]string{false: "before the link", true: "after the link"}[linkedFirst], func(t *testing.T) {
			const delay = time.Second
			st, clk := newInlineTimer(t, withWheelSize(20))
			tasks := addRefProbes(t, st, clk, 3, delay)
			target := tasks[1].entry()
			var cancelled, seen bool
			st.hooks = &hooks{refile: func(e *Entry, linked bool) {
				if e != target || linked != linkedFirst {
					return
				}
				seen = true
				require.NotZero(t, e.State.Load()&addLockBit, "the drain holds the add-lock")
				cancelled = tasks[1].Cancel()
				// The holder of the add-lock unlinks a cancelled entry
				// as it lets go (Entry.Cancel): no link made before or
				// after the Cancel survives it.
			}}
			clk.Advance(stageHold)
			st.runDue()
			require.True(t, seen)
			assert.True(t, cancelled, "the Cancel prevented a pending run")
			assert.Zero(t, target.State.Load()&addLockBit, "the add-lock is let go")
			assert.False(t, target.Linked())
			assert.Equal(t, 2, st.Size())
			clk.Advance(delay)
			st.runDue()
			assert.Equal(t, []int32{1, 0, 1}, []int32{tasks[0].runs.Load(), tasks[1].runs.Load(), tasks[2].runs.Load()})
			assert.Zero(t, st.Size())
		})
	}
}

// Close cancels the staged tasks, as it does those in buckets.
func TestCloseCancelsStagedTasks(t *testing.T) {
	t.Parallel()
	st, clk := newInlineTimer(t)
	tasks := addRefProbes(t, st, clk, 2, time.Minute)
	require.NoError(t, st.Close())
	for _, p := range tasks {
		assert.True(t, p.base.IsCancelled())
		assert.False(t, p.entry().Linked())
	}
	assert.Zero(t, st.Size())
}

// A drain files the staged tasks a chunk a turn, so that Adds run between
// its turns, and files them all before any bucket one of them may belong
// in is handled: each runs exactly at its deadline, even when one Advance
// passes all of them at once.
func TestDrainFilesAChunkATurn(t *testing.T) {
	t.Parallel()
	const n = 5*drainChunk + 17
	for _, whole := range []bool{false, true} {
		t.Run(map[bool]string{false: "a turn at a time", true: "one advance past every deadline"}[whole], func(t *testing.T) {
			st, clk := newInlineTimer(t, withWheelSize(20))
			ps := make([]*refProbe, n)
			for i := range ps {
				ps[i] = newRefProbe(stageMin+time.Duration(i%500)*time.Millisecond, clk)
				require.NoError(t, st.Add(ps[i]))
			}
			require.Equal(t, n, st.Size())
			if whole {
				clk.Advance(time.Hour)
				st.runDue()
			} else {
				clk.Advance(stageHold)
				require.True(t, st.AdvanceDue(), "the token is due: the first chunk")
				assert.Len(t, taken(st), n-drainChunk, "one chunk filed")
				assert.Equal(t, int32(1), st.backlogLen.Load(), "AdvanceClock goes on without waiting")
				assert.Equal(t, n, st.Size(), "counted once, filed or not")
				late := newRefProbe(stageMin, clk) // an Add between two turns stages anew
				require.NoError(t, st.Add(late))
				turns := 1
				for st.AdvanceDue() {
					turns++
				}
				assert.Equal(t, (n+drainChunk-1)/drainChunk, turns)
				assert.Empty(t, taken(st))
				assert.Zero(t, st.backlogLen.Load())
				assert.Equal(t, n+1, st.Size())
				for range 1000 { // a millisecond at a time, past every deadline
					clk.Advance(time.Millisecond)
					st.runDue()
				}
				assert.Equal(t, int32(1), late.runs.Load())
			}
			for i, p := range ps {
				require.Equal(t, int32(1), p.runs.Load(), "task %d", i)
				if !whole {
					require.Equal(t, p.base.Delay(), p.at, "task %d runs at its deadline", i)
				}
			}
			assert.Zero(t, st.Size())
		})
	}
}

// taken returns the staged tasks a drain has taken and not yet filed.
func taken(st *Timer) []*Ref {
	var out []*Ref
	for i, c := range st.staged.taken {
		if i == 0 {
			c = c[st.staged.takenAt:]
		}
		out = append(out, c...)
	}
	return out
}
