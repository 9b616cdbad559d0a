package core

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The model test checks the real wheels against the plainest possible
// timer: a map from live task to deadline. Random steps add, move, cancel
// and advance on a mock clock; after each step the two must agree on what
// ran, when, and how many are pending.

const modelTick = time.Millisecond

type modelTask struct {
	taskBase
	id  int
	log *[]*modelTask
}

func (m *modelTask) Run() { *m.log = append(*m.log, m) }

type model struct {
	t     testing.TB
	st    *Timer
	clk   *MockClock
	live  map[*modelTask]time.Duration // deadline of each pending task
	due   map[*modelTask]bool          // pending tasks that were due when added
	tasks []*modelTask
	ran   []*modelTask
}

func newModel(t testing.TB, wheelSize int) *model {
	clk := NewMockClock()
	clk.Set(time.Duration(rand.Int64N(int64(time.Second)))) // any origin
	st := newTimer("model", withClock(clk), withTick(modelTick), withWheelSize(wheelSize), inlineExecution())
	return &model{t: t, st: st, clk: clk, live: map[*modelTask]time.Duration{}, due: map[*modelTask]bool{}}
}

// dueAt is when the model expects a task with this deadline to run: at the
// first tick boundary at or after it, never earlier, at most a tick later.
func dueAt(deadline time.Duration) time.Duration {
	return (deadline + modelTick - 1) / modelTick * modelTick
}

func (m *model) add(p *modelTask, delay time.Duration) {
	p.SetDelay(delay)
	now := m.clk.Now()
	before := len(m.ran)
	require.NoError(m.t, m.st.Add(p))
	delete(m.live, p)
	require.Equal(m.t, before, len(m.ran), "Add runs nothing")
	delete(m.due, p)
	if delay <= 0 {
		// Due already: it runs at the next advance, whatever the clock,
		// and before the tasks of later buckets.
		m.due[p] = true
		m.live[p] = now
		return
	}
	m.live[p] = now + delay
}

func (m *model) cancel(p *modelTask) {
	_, live := m.live[p]
	require.Equal(m.t, live, p.Cancel(), "Cancel reports whether it prevented a run")
	require.True(m.t, p.IsCancelled())
	delete(m.live, p)
	delete(m.due, p)
}

func (m *model) advance(d time.Duration) {
	m.clk.Advance(d)
	now := m.clk.Now()
	start := len(m.ran)
	m.st.runDue()
	got := map[*modelTask]bool{}
	last := time.Duration(-1)
	for _, p := range m.ran[start:] {
		deadline, live := m.live[p]
		require.True(m.t, live, "task %d ran but was not pending", p.id)
		require.False(m.t, got[p], "task %d ran twice", p.id)
		require.GreaterOrEqual(m.t, now, deadline, "task %d ran early", p.id)
		if !m.due[p] {
			require.GreaterOrEqual(m.t, dueAt(deadline), last, "tasks ran out of tick order")
			last = dueAt(deadline)
		}
		got[p] = true
		delete(m.live, p)
		delete(m.due, p)
	}
	for p := range m.due {
		m.t.Fatalf("task %d, due when added, still pending after an advance", p.id)
	}
	for p, deadline := range m.live {
		require.Greater(m.t, dueAt(deadline), now,
			"task %d due at %v still pending at %v", p.id, dueAt(deadline), now)
	}
}

func (m *model) check() {
	require.Equal(m.t, len(m.live), m.st.Size(), "Size equals the live count")
}

// step performs one operation chosen by op and arg.
func (m *model) step(op, arg uint16) {
	pick := func() *modelTask { return m.tasks[int(arg)%len(m.tasks)] }
	// Delays reach a few seconds: with small wheels that is several levels.
	delay := time.Duration(int64(arg)%4000-50) * modelTick / 4
	switch {
	case op%8 < 3 || len(m.tasks) == 0:
		p := &modelTask{id: len(m.tasks), log: &m.ran}
		m.tasks = append(m.tasks, p)
		m.add(p, delay)
	case op%8 == 3: // re-add: moves a pending task, revives a fired or cancelled one
		m.add(pick(), delay)
	case op%8 == 4:
		m.cancel(pick())
	default:
		m.advance(time.Duration(arg%2000) * modelTick / 10)
	}
	m.check()
}

func (m *model) drain() {
	for len(m.live) > 0 {
		m.advance(time.Hour)
	}
	m.check()
}

func TestModelRandom(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, seed))
		m := newModel(t, 2+int(seed%5))
		for range 3000 {
			m.step(uint16(r.Uint32()), uint16(r.Uint32()))
		}
		m.drain()
		require.NoError(t, m.st.Close())
	}
}

// FuzzModel drives the model test from fuzzer input: each 4 bytes are one
// step. Run it with `make fuzz`.
func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 10, 0, 20, 5, 0, 100, 0})
	f.Add([]byte{0, 200, 1, 0, 3, 7, 0, 0, 4, 1, 0, 0, 7, 255, 7, 0})
	f.Add([]byte{0, 0, 0, 0, 3, 0, 0, 0, 5, 255, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		m := newModel(t, 2+int(data[0]%6))
		defer m.st.Close()
		data = data[1:]
		for len(data) >= 4 {
			m.step(uint16(data[0])|uint16(data[1])<<8, uint16(data[2])|uint16(data[3])<<8)
			data = data[4:]
		}
		m.drain()
	})
}
