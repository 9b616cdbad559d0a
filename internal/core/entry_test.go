package core

import (
	"testing"
	"unsafe"
)

func TestListSize(t *testing.T) {
	if got := unsafe.Sizeof(List{}); got%128 != 0 {
		t.Fatalf("List is %d bytes, not a multiple of 128", got)
	}
}

// What linking and unlinking write in a List shares one 64-byte line.
func TestHotFieldsInOneLine(t *testing.T) {
	if end := hotEnd(); end > 64 {
		t.Fatalf("the hot fields end at byte %d, past the first line", end)
	}
}
