package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The probe passes on 200 only: a draining gateway (503) or none at all fails it.
func TestHealthProbe(t *testing.T) {
	status := http.StatusOK
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
	}))
	url := server.URL + "/health"
	if err := healthProbe(url, time.Minute); err != nil {
		t.Fatalf("a healthy gateway: %v", err)
	}
	status = http.StatusServiceUnavailable
	if err := healthProbe(url, time.Minute); err == nil {
		t.Fatal("a draining gateway passed")
	}
	server.Close()
	if err := healthProbe(url, time.Minute); err == nil {
		t.Fatal("no gateway passed")
	}
}
