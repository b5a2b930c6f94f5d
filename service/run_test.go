package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/syncd/syncd/service"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func managed() bool { return false }

func TestRunForeground(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type key struct{}
	ctx = context.WithValue(ctx, key{}, "outer")
	want := errors.New("done")
	err := service.Run(ctx, service.RunConfig{Interactive: func() bool { return true }}, func(c context.Context) error {
		if c.Value(key{}) != "outer" {
			t.Error("the program did not get Run's context")
		}
		return want
	})
	if err != want {
		t.Errorf("Run = %v, want %v", err, want)
	}
}

func TestRunManagedStopsOnCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- service.Run(ctx, service.RunConfig{Name: "syncd-test", Interactive: managed}, func(c context.Context) error {
			close(started)
			<-c.Done()
			return nil
		})
	}()
	<-started
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

func TestRunManagedProgramFails(t *testing.T) {
	t.Parallel()
	want := errors.New("another syncd is already running")
	err := service.Run(context.Background(), service.RunConfig{Name: "syncd-test", Interactive: managed}, func(context.Context) error {
		return want
	})
	if !errors.Is(err, want) {
		t.Errorf("Run = %v, want %v", err, want)
	}
}

func TestRunManagedStopTimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	returned := make(chan struct{})
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- service.Run(ctx, service.RunConfig{Name: "syncd-test", Interactive: managed, StopTimeout: 20 * time.Millisecond}, func(context.Context) error {
			defer close(returned)
			close(started)
			<-release // ignores its context
			return nil
		})
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, service.ErrStopTimeout) {
		t.Errorf("Run = %v, want ErrStopTimeout", err)
	}
	close(release)
	<-returned
}
