"""The stationarity (KKT) engine shared by the attacks of Haim et al. 2022 and Buzaglo et al. 2023."""
