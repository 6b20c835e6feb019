listen pgqueue
