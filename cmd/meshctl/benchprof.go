package main

import (
	"errors"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
)

// startEndProfiles turns on the block, mutex and allocation profiles (each
// when its file is named) and returns what writes them at the end of the
// run.
func startEndProfiles(blockFile, mutexFile, allocsFile string) (stop func(), err error) {
	if allocsFile != "" {
		// One sample per 64 KiB allocated (the default 512 KiB misses most
		// of a call's small allocations); set before the run allocates.
		runtime.MemProfileRate = 64 << 10
	}
	if blockFile != "" {
		runtime.SetBlockProfileRate(10_000) // one sample per 10 µs blocked
	}
	if mutexFile != "" {
		runtime.SetMutexProfileFraction(10)
	}
	return func() {
		for _, p := range []struct{ name, file string }{{"block", blockFile}, {"mutex", mutexFile}, {"allocs", allocsFile}} {
			if p.file == "" {
				continue
			}
			if err := writeProfile(p.name, p.file); err != nil {
				os.Stderr.WriteString("meshctl: " + err.Error() + "\n")
			}
		}
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(0)
	}, nil
}

func writeProfile(name, file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup(name).WriteTo(f, 0), f.Close())
}

// startTrace writes an execution trace of the run to file.
func startTrace(file string) (stop func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { trace.Stop(); f.Close() }, nil
}
