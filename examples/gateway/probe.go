package main

import (
	"fmt"
	"io"
	"net/http"
	"time"
)

// healthProbe asks url (a gateway's /health) once and says whether it answered 200: `--health-probe URL`, the
// container image's HEALTHCHECK, since slim images have no curl. /health answers 503 once the drain has begun.
func healthProbe(url string, timeout time.Duration) error {
	client := http.Client{Timeout: timeout}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}
