{{ recon_windowed('zone_revenue_hourly') }}
