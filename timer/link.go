package timer

import "github.com/purgatory-go/purgatory/internal/tasklink"

func init() {
	tasklink.Clock = func(tm any) (now func() int64, addAt func(task any, now int64) error) {
		t, ok := tm.(Timer)
		if !ok {
			return nil, nil
		}
		st := systemTimerOf(t)
		if st == nil {
			return nil, nil
		}
		return func() int64 { return int64(st.now()) },
			func(task any, now int64) error { return st.addAt(task.(Task), now) }
	}
}
