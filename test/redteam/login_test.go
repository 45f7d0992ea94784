package redteam_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// tokenFrom asks the token endpoint for user's token with password, from
// the loopback address from (the server throttles by the connection's
// peer), and returns the status.
func tokenFrom(ctx context.Context, from, user, password string) (int, string) {
	GinkgoHelper()
	client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext}}
	defer client.CloseIdleConnections()
	form := url.Values{"grant_type": {"password"}, "username": {user}, "password": {password}, "scope": {"openid profile email federated:id groups"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, server.URL()+"/sky/issuer/token", strings.NewReader(form.Encode()))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("fly", "Zmx5")
	resp, err := client.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var _ = Describe("login throttling", func() {
	// The attack (issue 28, 2): 10 failed logins for a user name from one
	// address made the real password answer 429 from any other address,
	// and one failure every 6 s kept the user out for good. Now the
	// guesser's failures spend the allowance of that name at that address.
	It("slows a guesser at its address and never locks the owner out elsewhere", func(ctx SpecContext) {
		guesser := "127.0.0.2"
		statuses := map[int]int{}
		for range 14 {
			status, body := tokenFrom(ctx, guesser, member, "not-the-password")
			Expect(status).To(BeElementOf(http.StatusUnauthorized, http.StatusTooManyRequests), body)
			statuses[status]++
		}
		// Slowed: past 10 failures, 429 before any password is compared.
		Expect(statuses[http.StatusUnauthorized]).To(Equal(10), "failures counted before the throttle")
		Expect(statuses[http.StatusTooManyRequests]).To(Equal(4))
		// Even the right password waits at the guesser's address.
		status, body := tokenFrom(ctx, guesser, member, passwords[member])
		Expect(status).To(Equal(http.StatusTooManyRequests), body)
		Expect(body).To(ContainSubstring("too many failed logins"))

		// The owner, at another address, logs in with the real fly.
		login(ctx, member, "main")
		status, body = tokenFrom(ctx, "127.0.0.3", member, passwords[member])
		Expect(status).To(Equal(http.StatusOK), body)
	})
})
