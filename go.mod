module hookd

go 1.26
