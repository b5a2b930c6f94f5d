package transport

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// maxRetryAfter bounds what ParseRetryAfter returns, so that a huge
// delta-seconds cannot overflow a time.Duration. Policy.MaxRetryAfter
// bounds it further.
const maxRetryAfter = time.Duration(math.MaxInt64)

// ParseRetryAfter parses a Retry-After header value (RFC 9110 section
// 10.2.3): either delta-seconds ("120") or an HTTP-date ("Wed, 21 Oct
// 2015 07:28:00 GMT", and the obsolete RFC 850 and asctime forms), the
// latter relative to now. A date in the past gives 0. ok is false for an
// empty or malformed value; the duration is then 0.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		var secs int64
		for _, c := range []byte(v) {
			if c < '0' || c > '9' {
				return 0, false
			}
			if secs > (math.MaxInt64/int64(time.Second)-int64(c-'0'))/10 {
				return maxRetryAfter, true // saturate
			}
			secs = secs*10 + int64(c-'0')
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d = t.Sub(now) // saturates at the Duration bounds
	if d < 0 {
		d = 0
	}
	return d, true
}
