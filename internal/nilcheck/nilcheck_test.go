package nilcheck

import "testing"

func TestIsNil(t *testing.T) {
	type s struct{}
	var p *s
	var i any = p
	for _, c := range []struct {
		v    any
		want bool
	}{{nil, true}, {i, true}, {&s{}, false}, {s{}, false}, {0, false}} {
		if got := IsNil(c.v); got != c.want {
			t.Errorf("IsNil(%#v) = %v, want %v", c.v, got, c.want)
		}
	}
}
