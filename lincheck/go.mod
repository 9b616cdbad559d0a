module github.com/purgatory-go/purgatory/lincheck

go 1.24

require (
	github.com/purgatory-go/purgatory v0.0.0
	go.uber.org/goleak v1.3.0
)

require github.com/anishathalye/porcupine v1.3.1

replace github.com/purgatory-go/purgatory => ..
