from kafkactl.app import main

main()
