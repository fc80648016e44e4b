module hookd/sdktest/go

go 1.26.0

require github.com/svix/svix-webhooks v1.74.1

require github.com/google/uuid v1.6.0 // indirect
